package loadgen

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// ReadSSE reads Server-Sent Events from r, calling line after every line
// and event for each dispatched event (its id and data), until r ends or
// event fails.
func ReadSSE(r io.Reader, line func(), event func(id, data string) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var id string
	var data strings.Builder
	hasData := false
	for {
		raw, err := br.ReadString('\n')
		if raw == "" && err != nil {
			return ignoreEOF(err)
		}
		line()
		l := strings.TrimRight(raw, "\r\n")
		switch {
		case l == "":
			if hasData {
				if err := event(id, data.String()); err != nil {
					return err
				}
			}
			id, hasData = "", false
			data.Reset()
		case strings.HasPrefix(l, ":"):
			// comment (heartbeat)
		default:
			field, value, _ := strings.Cut(l, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				id = value
			case "data":
				if hasData {
					data.WriteByte('\n')
				}
				data.WriteString(value)
				hasData = true
			}
		}
		if err != nil {
			return ignoreEOF(err)
		}
	}
}

func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// Int64 is a 64-bit integer of the REST facade or the stream: a JSON
// string (protojson's mapping) or, from a server that predates it, a
// JSON number. It decodes both.
type Int64 int64

// UnmarshalJSON accepts "123", 123 and null (0).
func (n *Int64) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		*n = 0
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("not a 64-bit integer: " + string(b))
	}
	*n = Int64(v)
	return nil
}

// event is the part of a stream event the load generator reads.
type event struct {
	Type        string `json:"type"`
	MessagePart *struct {
		Role string `json:"role"`
	} `json:"message_part"`
	Message *struct {
		ID   Int64  `json:"id"`
		Role string `json:"role"`
	} `json:"message"`
	Status *struct {
		Status string `json:"status"`
	} `json:"status"`
	Error *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}

func parseEvent(data string) (event, bool) {
	var ev event
	if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type == "" {
		return event{}, false
	}
	return ev, true
}
