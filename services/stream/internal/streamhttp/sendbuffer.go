package streamhttp

import "sync"

// sendBuffers are the buffers sends encode into, shared by the replica's
// connections: a connection holds one only while it writes. A buffer of
// its own per connection would grow (allocating and clearing fresh memory)
// the first time each watcher got a larger batch, which for thousands of
// watchers of one chat is a good part of a turn's opening round, and it
// would be held for the connection's life.
var sendBuffers = sync.Pool{New: func() any { b := make([]byte, 0, sendBufferSize); return &b }}

const (
	sendBufferSize = 8 << 10
	// maxPooledSendBuffer: a buffer grown past it (a long history sent at
	// connect) is left to the garbage collector rather than kept.
	maxPooledSendBuffer = 256 << 10
)

// withSendBuffer runs encode on an empty buffer of the pool and returns
// the buffer encode returns (grown, perhaps) to the pool.
func withSendBuffer(encode func(buf []byte) ([]byte, error)) error {
	bp := sendBuffers.Get().(*[]byte)
	buf, err := encode((*bp)[:0])
	if cap(buf) <= maxPooledSendBuffer {
		*bp = buf[:0]
		sendBuffers.Put(bp)
	}
	return err
}
