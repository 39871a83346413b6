package scripted

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/chatd/chatd/pkg/llm"
)

// segmentKind is the source of a piece of the answer's text.
type segmentKind int

const (
	segReply  segmentKind = iota // ::reply <text>
	segEcho                      // the message's non-directive text
	segStream                    // ::stream <n> <rate>
)

type segment struct {
	kind segmentKind
	text string  // reply, echo
	n    int     // stream: token count
	rate float64 // stream: tokens per second, 0 = as fast as possible
}

type toolCall struct {
	name string
	args json.RawMessage
}

type failure struct {
	kind llm.Kind
	// first is how many attempts fail; 0 for every attempt.
	first int
}

// script is a parsed user message.
type script struct {
	think    []string
	segments []segment
	tools    []toolCall
	fail     *failure
	stall    bool
	usage    *llm.Usage
	title    *string // ::title <text>
	// titleFail is ::title-fail: the failure of title requests.
	titleFail *failure
	files     bool // ::files
	system    bool // ::system
	// firstLine is the first non-blank line that is not a directive.
	firstLine string
}

// titleAnswer is the answer to a title request.
func (s script) titleAnswer() string {
	switch {
	case s.title != nil && *s.title != "":
		return *s.title
	case s.firstLine != "":
		return "Title: " + s.firstLine
	}
	return "Scripted chat"
}

// parse reads a user message: each line that starts with "::" (after
// leading blanks) is a directive; the other lines are echoed.
func parse(text string) (script, error) {
	var s script
	var echo []string
	echoAt := -1 // index in s.segments where the echo segment goes
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if !strings.HasPrefix(line, "::") {
			if line != "" && echoAt < 0 {
				echoAt = len(s.segments)
				s.firstLine = line
			}
			echo = append(echo, strings.TrimRight(raw, "\r"))
			continue
		}
		if err := s.directive(line); err != nil {
			return script{}, fmt.Errorf("scripted: line %d %q: %w", i+1, line, err)
		}
	}
	if echoAt >= 0 {
		seg := segment{kind: segEcho, text: "echo: " + strings.TrimSpace(strings.Join(echo, "\n"))}
		s.segments = append(s.segments[:echoAt], append([]segment{seg}, s.segments[echoAt:]...)...)
	}
	return s, nil
}

func (s *script) directive(line string) error {
	name, rest := splitWord(strings.TrimPrefix(line, "::"))
	args := strings.Fields(rest)
	switch name {
	case "reply":
		s.segments = append(s.segments, segment{kind: segReply, text: rest})
	case "stream":
		if len(args) < 1 || len(args) > 2 {
			return fmt.Errorf("want ::stream <n> <rate>")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 {
			return fmt.Errorf("token count %q is not a non-negative integer", args[0])
		}
		rate := 0.0
		if len(args) == 2 {
			rate, err = strconv.ParseFloat(args[1], 64)
			if err != nil || rate < 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
				return fmt.Errorf("rate %q is not a non-negative number of tokens per second", args[1])
			}
		}
		s.segments = append(s.segments, segment{kind: segStream, n: n, rate: rate})
	case "think":
		s.think = append(s.think, rest)
	case "tool":
		toolName, input := splitWord(rest)
		if toolName == "" {
			return fmt.Errorf("want ::tool <name> <json-args>")
		}
		if input == "" {
			input = "{}"
		}
		if !json.Valid([]byte(input)) || !bytes.HasPrefix([]byte(input), []byte("{")) {
			return fmt.Errorf("tool arguments %q are not a JSON object", input)
		}
		s.tools = append(s.tools, toolCall{name: toolName, args: json.RawMessage(input)})
	case "fail", "title-fail":
		if len(args) < 1 || len(args) > 2 {
			return fmt.Errorf("want ::%s retryable|fatal [n]", name)
		}
		f := &failure{}
		switch args[0] {
		case "retryable":
			f.kind = llm.Retryable
		case "fatal":
			f.kind = llm.Fatal
		default:
			return fmt.Errorf("failure kind %q is neither retryable nor fatal", args[0])
		}
		if len(args) == 2 {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("attempt count %q is not a positive integer", args[1])
			}
			f.first = n
		}
		if name == "title-fail" {
			s.titleFail = f
		} else {
			s.fail = f
		}
	case "title":
		s.title = &rest
	case "files":
		s.files = true
	case "system":
		s.system = true
	case "stall":
		if len(args) != 0 {
			return fmt.Errorf("::stall takes no arguments")
		}
		s.stall = true
	case "usage":
		if len(args) != 2 {
			return fmt.Errorf("want ::usage <prompt_tokens> <output_tokens>")
		}
		p, err1 := strconv.ParseInt(args[0], 10, 64)
		o, err2 := strconv.ParseInt(args[1], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || o < 0 {
			return fmt.Errorf("token counts %q %q are not non-negative integers", args[0], args[1])
		}
		s.usage = &llm.Usage{PromptTokens: p, OutputTokens: o}
	default:
		return fmt.Errorf("unknown directive ::%s (know ::reply, ::stream, ::think, ::tool, ::fail, ::stall, ::usage, ::title, ::title-fail, ::files, ::system)", name)
	}
	return nil
}

// splitWord splits s at its first blank into a word and the trimmed rest.
func splitWord(s string) (word, rest string) {
	s = strings.TrimSpace(s)
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		return s[:i], strings.TrimSpace(s[i:])
	}
	return s, ""
}

// failsOn reports whether attempt (1-based) fails.
func (f *failure) failsOn(attempt int) bool {
	return f != nil && (f.first == 0 || attempt <= f.first)
}
