package httperror_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/gen/openapi"
	"github.com/chatd/chatd/pkg/httperror"
)

// TestOpenAPIErrorDefinition: the OpenAPI document describes the body
// Write sends, with every code name Write can send, and every operation's
// error answers (default and 4xx/5xx) refer to it, not to the generator's
// google.rpc.Status.
func TestOpenAPIErrorDefinition(t *testing.T) {
	var doc struct {
		Paths       map[string]map[string]json.RawMessage `json:"paths"`
		Definitions map[string]struct {
			Required   []string `json:"required"`
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		} `json:"definitions"`
	}
	require.NoError(t, json.Unmarshal(openapi.JSON, &doc))
	def, ok := doc.Definitions["Error"]
	require.True(t, ok, "the document defines Error")
	_, hasStatus := doc.Definitions["Status"]
	require.False(t, hasStatus, "google.rpc.Status is not what chatd answers with")

	var fields []string
	for name := range def.Properties {
		fields = append(fields, name)
	}
	var bodyFields []string
	for i := range reflect.TypeFor[httperror.Body]().NumField() {
		tag := reflect.TypeFor[httperror.Body]().Field(i).Tag.Get("json")
		bodyFields = append(bodyFields, strings.Split(tag, ",")[0])
	}
	sort.Strings(fields)
	sort.Strings(bodyFields)
	require.Equal(t, bodyFields, fields, "the definition's properties are the body's fields")
	require.ElementsMatch(t, []string{"message", "code", "reason"}, def.Required)

	var names []string
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		names = append(names, httperror.CodeName(c))
	}
	require.ElementsMatch(t, names, def.Properties["code"].Enum)

	ops := 0
	for path, methods := range doc.Paths {
		for method, raw := range methods {
			var op struct {
				Responses map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			errors := 0
			for code, resp := range op.Responses {
				if strings.HasPrefix(code, "2") {
					continue
				}
				require.Equal(t, "#/definitions/Error", resp.Schema.Ref, "%s %s answers %s", method, path, code)
				errors++
			}
			require.Positive(t, errors, "%s %s documents its error answers", method, path)
			ops++
		}
	}
	require.Greater(t, ops, 20)
}
