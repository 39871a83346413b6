package chatapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Input hygiene at the edge, for every endpoint at once: text that
// Postgres cannot store (NUL bytes) or that is not text (invalid UTF-8)
// is refused with a 400 naming the field, before any handler runs, and a
// REST body is exactly one JSON value.

// ValidateTextUnary refuses a request whose string fields, at any depth,
// hold NUL bytes or invalid UTF-8.
func ValidateTextUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m, ok := req.(proto.Message); ok {
			if err := checkText(m); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// ValidateTextStream applies ValidateTextUnary's check to each message a
// stream receives.
func ValidateTextStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, textCheckedStream{ss})
	}
}

type textCheckedStream struct{ grpc.ServerStream }

func (s textCheckedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		return checkText(pm)
	}
	return nil
}

// checkText walks m's populated fields and returns an InvalidArgument
// status naming the first bad string's path (content[0].text).
func checkText(m proto.Message) error {
	path, problem := badText(m.ProtoReflect(), "")
	if problem == "" {
		return nil
	}
	if path == "" {
		path = "a text field"
	}
	return status.Errorf(codes.InvalidArgument, "%s must not contain %s", path, problem)
}

func badText(m protoreflect.Message, prefix string) (path, problem string) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Value": // the JSON value itself: no field name in the path
		var p, why string
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			p, why = badValue(fd, v, prefix)
			return why == ""
		})
		return p, why
	case "google.protobuf.Struct": // a JSON object: its keys are the path
		fd := m.Descriptor().Fields().ByName("fields")
		return badValue(fd, m.Get(fd), prefix)
	case "google.protobuf.ListValue":
		fd := m.Descriptor().Fields().ByName("values")
		return badValue(fd, m.Get(fd), prefix)
	}
	var p, why string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p, why = badValue(fd, v, join(prefix, string(fd.Name())))
		return why == ""
	})
	return p, why
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// badValue checks one field's value, at path.
func badValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) (string, string) {
	switch {
	case fd.IsList():
		l := v.List()
		for i := 0; i < l.Len(); i++ {
			if p, why := badSingle(fd, l.Get(i), path+"["+strconv.Itoa(i)+"]"); why != "" {
				return p, why
			}
		}
	case fd.IsMap():
		var p, why string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			key := k.String()
			if w := textProblem(key); w != "" {
				p, why = path+" keys", w
				return false
			}
			p, why = badSingle(fd.MapValue(), mv, path+"["+strconv.Quote(key)+"]")
			return why == ""
		})
		return p, why
	default:
		return badSingle(fd, v, path)
	}
	return "", ""
}

func badSingle(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) (string, string) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return path, textProblem(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return badText(v.Message(), path)
	}
	return "", ""
}

func textProblem(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "NUL bytes"
	case !utf8.ValidString(s):
		return "invalid UTF-8"
	}
	return ""
}

// singleValueJSON is the gateway's JSON marshaler with bodies held to one
// JSON value: anything but white space after it is a 400, where
// encoding/json alone would decode the first value and ignore the rest.
type singleValueJSON struct{ *runtime.JSONPb }

func (j singleValueJSON) NewDecoder(r io.Reader) runtime.Decoder {
	inner := j.JSONPb.NewDecoder(r)
	dw, ok := inner.(runtime.DecoderWrapper)
	if !ok {
		return inner
	}
	return runtime.DecoderFunc(func(v any) error {
		if err := dw.Decode(v); err != nil {
			return syntaxSentence(err)
		}
		if _, err := dw.Decoder.Token(); !errors.Is(err, io.EOF) {
			return errTrailingData
		}
		return nil
	})
}

var errTrailingData = errors.New("The request body must be a single JSON value; there is more after it.")

// syntaxSentence words a body that is not JSON at all: the gateway reads
// it with encoding/json before protojson sees it, and encoding/json's
// error ("invalid character 'A' looking for beginning of value") is a
// parser's, not a sentence for the caller. Other errors pass through
// (decodeMessage words protojson's).
func syntaxSentence(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("The request body is not valid JSON: its syntax breaks at byte %d (see /api/v2/openapi.json).", se.Offset)
	}
	return err
}
