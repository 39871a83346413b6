package chatapi

import (
	"fmt"
	"regexp"
	"strings"
)

// maxBodyDepth bounds the nesting of a REST body in protobuf messages (a
// JSON object inside a google.protobuf.Struct takes two: Struct, Value).
const maxBodyDepth = 100

// grpc-gateway's words for a path or query parameter it could not parse:
// "type mismatch, parameter: queued_message_id, error: strconv.ParseInt:
// parsing "abc": invalid syntax" (path) and `parsing field "page_size":
// strconv.ParseInt: …` (query).
var (
	pathParamRe  = regexp.MustCompile(`^type mismatch, parameter: ([a-z0-9_.]{1,64}), error: (.*)$`)
	queryParamRe = regexp.MustCompile(`^parsing field "([a-z0-9_.]{1,64})": (.*)$`)
)

// paramMessage rewords a parameter parse error as a sentence that names
// the parameter and what it must be, without the parser's internals. A
// path parameter is named in words (queued message id), a query parameter
// as the caller spells it (page_size).
func paramMessage(msg string) (string, bool) {
	if m := pathParamRe.FindStringSubmatch(msg); m != nil {
		return paramSentence(strings.ReplaceAll(m[1], "_", " "), m[2]), true
	}
	if m := queryParamRe.FindStringSubmatch(msg); m != nil {
		return paramSentence(m[1], m[2]), true
	}
	return "", false
}

func paramSentence(name, cause string) string {
	switch {
	case strings.Contains(cause, "value out of range"):
		return fmt.Sprintf("%s is out of range.", name)
	case strings.Contains(cause, "ParseInt"), strings.Contains(cause, "ParseUint"):
		return fmt.Sprintf("%s must be a number.", name)
	case strings.Contains(cause, "ParseFloat"):
		return fmt.Sprintf("%s must be a number.", name)
	case strings.Contains(cause, "ParseBool"):
		return fmt.Sprintf("%s must be true or false.", name)
	}
	return fmt.Sprintf("%s is not a valid value for this parameter.", name)
}
