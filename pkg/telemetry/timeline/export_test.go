package timeline

// OpenEvery is Open with its periodic flush every interval, for a test
// that must not see it.
var OpenEvery = openEvery
