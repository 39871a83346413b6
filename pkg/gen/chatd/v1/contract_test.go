package chatdv1_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// The chat:update:{chat_id} payload is fixed by the spec ("Notification
// channels"): these nine fields and nothing else.
var chatUpdateFields = []string{
	"snapshot_version",
	"worker_id",
	"runner_id",
	"history_version",
	"queue_version",
	"retry_state_version",
	"generation_attempt",
	"status",
	"archived",
}

func fieldNames(m proto.Message) []string {
	fields := m.ProtoReflect().Descriptor().Fields()
	names := make([]string, 0, fields.Len())
	for i := range fields.Len() {
		names = append(names, string(fields.Get(i).Name()))
	}
	return names
}

func TestChatUpdateNotificationHasExactlyTheSpecFields(t *testing.T) {
	t.Parallel()

	got := fieldNames(&chatdv1.ChatUpdateNotification{})
	if !slices.Equal(got, chatUpdateFields) {
		t.Fatalf("ChatUpdateNotification fields = %v, want exactly %v", got, chatUpdateFields)
	}

	// worker_id and runner_id are NULL when no worker owns the chat, so they
	// must distinguish "unset" from "".
	fields := (&chatdv1.ChatUpdateNotification{}).ProtoReflect().Descriptor().Fields()
	for _, name := range []protoreflect.Name{"worker_id", "runner_id"} {
		if !fields.ByName(name).HasPresence() {
			t.Errorf("%s has no presence; want optional", name)
		}
	}
}

func TestOwnershipNotificationHasExactlyTheSpecFields(t *testing.T) {
	t.Parallel()

	got := fieldNames(&chatdv1.OwnershipNotification{})
	if want := []string{"chat_id", "snapshot_version"}; !slices.Equal(got, want) {
		t.Fatalf("OwnershipNotification fields = %v, want exactly %v", got, want)
	}
}

func TestProtoJSONUsesSnakeCaseNames(t *testing.T) {
	t.Parallel()

	msg := &chatdv1.ChatUpdateNotification{
		SnapshotVersion:   7,
		WorkerId:          proto.String("w"),
		RunnerId:          proto.String("r"),
		HistoryVersion:    1,
		QueueVersion:      2,
		RetryStateVersion: 3,
		GenerationAttempt: 4,
		Status:            "running",
		Archived:          true,
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
	if err != nil {
		t.Fatalf("error marshaling: %v", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatalf("error decoding %s: %v", b, err)
	}
	for _, name := range chatUpdateFields {
		if _, ok := obj[name]; !ok {
			t.Errorf("JSON %s lacks %q", b, name)
		}
	}
	if len(obj) != len(chatUpdateFields) {
		t.Errorf("JSON %s has %d keys, want %d", b, len(obj), len(chatUpdateFields))
	}

	// A nested resource as the REST facade renders it.
	chat := &chatdv1.Chat{Id: "c", OrganizationId: "o", OwnerId: "u", RootChatId: proto.String("c"), LastError: proto.String("boom")}
	b, err = protojson.MarshalOptions{UseProtoNames: true}.Marshal(chat)
	if err != nil {
		t.Fatalf("error marshaling: %v", err)
	}
	obj = nil
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatalf("error decoding %s: %v", b, err)
	}
	for _, name := range []string{"organization_id", "owner_id", "root_chat_id", "last_error"} {
		if _, ok := obj[name]; !ok {
			t.Errorf("JSON %s lacks %q", b, name)
		}
	}
	for _, name := range []string{"organizationId", "ownerId", "rootChatId", "lastError"} {
		if _, ok := obj[name]; ok {
			t.Errorf("JSON %s has camelCase key %q", b, name)
		}
	}
}

// restJSON is the REST facade's marshalling: grpc-gateway's protojson with
// snake_case names and default values emitted (fields with presence, i.e.
// proto3 optional and message fields, stay absent when unset).
var restJSON = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}

func marshalREST(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := restJSON.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// The objects web clients see have exactly the shapes of docs/api.md's
// tables: status and role as the spec's words, parts as flat objects
// with a type and that type's fields, booleans always present, unset optional
// fields absent. protojson renders int64 fields (message and queued message
// ids, positions, token counts) as JSON strings.
func TestRESTShapes(t *testing.T) {
	t.Parallel()

	created := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	updated := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC))

	chat := &chatdv1.Chat{
		Id:             "c",
		OrganizationId: "o",
		OwnerId:        "u",
		Title:          "Hello",
		Status:         "running",
		CreatedAt:      created,
		UpdatedAt:      updated,
		TitleSource:    "user",
		TitleUpdatedAt: created,
	}
	const chatJSON = `{
		"id": "c",
		"organization_id": "o",
		"owner_id": "u",
		"title": "Hello",
		"status": "running",
		"archived": false,
		"created_at": "2025-01-02T03:04:05Z",
		"updated_at": "2025-01-02T03:04:06Z",
		"title_source": "user",
		"title_updated_at": "2025-01-02T03:04:05Z",
		"dynamic_tools": []
	}`
	require.JSONEq(t, chatJSON, marshalREST(t, chat))

	// A sub-agent chat in error: the optional fields appear once set.
	sub := proto.CloneOf(chat)
	sub.ParentChatId = proto.String("p")
	sub.RootChatId = proto.String("r")
	sub.Status = "error"
	sub.LastError = proto.String("boom")
	sub.Archived = true
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(marshalREST(t, sub)), &obj))
	require.Equal(t, "p", obj["parent_chat_id"])
	require.Equal(t, "r", obj["root_chat_id"])
	require.Equal(t, "error", obj["status"])
	require.Equal(t, "boom", obj["last_error"])
	require.Equal(t, true, obj["archived"])

	args, err := structpb.NewValue(map[string]any{"q": 1})
	require.NoError(t, err)
	msg := &chatdv1.Message{
		Id:     42,
		ChatId: "c",
		Role:   "assistant",
		Content: []*chatdv1.MessagePart{
			{Type: "text", Text: proto.String("Let me ask.")},
			{Type: "tool-call", ToolCallId: proto.String("c1"), ToolName: proto.String("ask"), Args: args,
				State: proto.String("running"), StartedAt: created},
		},
		CreatedAt: created,
		Usage:     &chatdv1.Usage{PromptTokens: 10, OutputTokens: 5},
		RuntimeMs: proto.Int64(1500),
	}
	const msgJSON = `{
		"id": "42",
		"chat_id": "c",
		"role": "assistant",
		"content": [
			{"type": "text", "text": "Let me ask."},
			{"type": "tool-call", "tool_call_id": "c1", "tool_name": "ask", "args": {"q": 1},
			 "state": "running", "started_at": "2025-01-02T03:04:05Z"}
		],
		"created_at": "2025-01-02T03:04:05Z",
		"usage": {"prompt_tokens": "10", "output_tokens": "5"},
		"runtime_ms": "1500"
	}`
	require.JSONEq(t, msgJSON, marshalREST(t, msg))

	// The other part types carry their own fields only; a tool-result always
	// carries is_error, a failed one too.
	result, err := structpb.NewValue(map[string]any{"answer": "yes"})
	require.NoError(t, err)
	for _, tc := range []struct {
		part *chatdv1.MessagePart
		want string
	}{
		{&chatdv1.MessagePart{Type: "reasoning", Text: proto.String("hmm")}, `{"type":"reasoning","text":"hmm"}`},
		{
			&chatdv1.MessagePart{Type: "tool-result", ToolCallId: proto.String("c1"), ToolName: proto.String("ask"), Result: result, IsError: proto.Bool(false)},
			`{"type":"tool-result","tool_call_id":"c1","tool_name":"ask","result":{"answer":"yes"},"is_error":false}`,
		},
		{
			&chatdv1.MessagePart{Type: "tool-result", ToolCallId: proto.String("c2"), ToolName: proto.String("ask"), Result: structpb.NewStringValue("no such file"), IsError: proto.Bool(true)},
			`{"type":"tool-result","tool_call_id":"c2","tool_name":"ask","result":"no such file","is_error":true}`,
		},
		{
			&chatdv1.MessagePart{Type: "file", FileId: proto.String("f"), MediaType: proto.String("image/png"), Name: proto.String("a.png")},
			`{"type":"file","file_id":"f","media_type":"image/png","name":"a.png"}`,
		},
	} {
		require.JSONEq(t, tc.want, marshalREST(t, tc.part))
	}

	// A user message that was not promoted from the queue and has no usage:
	// queued_message_id and usage are absent.
	user := &chatdv1.Message{
		Id:        41,
		ChatId:    "c",
		Role:      "user",
		Content:   []*chatdv1.MessagePart{{Type: "text", Text: proto.String("hi")}},
		CreatedAt: created,
	}
	const userJSON = `{
		"id": "41",
		"chat_id": "c",
		"role": "user",
		"content": [{"type": "text", "text": "hi"}],
		"created_at": "2025-01-02T03:04:05Z"
	}`
	require.JSONEq(t, userJSON, marshalREST(t, user))

	send := &chatdv1.SendMessageResponse{Message: user, Messages: []*chatdv1.Message{user}}
	require.JSONEq(t, `{
		"queued": false,
		"message": `+userJSON+`,
		"messages": [`+userJSON+`]
	}`, marshalREST(t, send))

	queued := &chatdv1.SendMessageResponse{
		Queued: true,
		QueuedMessage: &chatdv1.QueuedMessage{
			Id: 7, ChatId: "c", Position: 1, CreatedAt: created,
			Content: []*chatdv1.MessagePart{{Type: "text", Text: proto.String("later")}},
		},
	}
	require.JSONEq(t, `{
		"queued": true,
		"messages": [],
		"queued_message": {
			"id": "7",
			"chat_id": "c",
			"content": [{"type": "text", "text": "later"}],
			"position": "1",
			"created_at": "2025-01-02T03:04:05Z"
		}
	}`, marshalREST(t, queued))
}

// The REST facade spells enumerations as the spec's words, so the protos
// declare no enums.
func TestNoEnums(t *testing.T) {
	t.Parallel()

	for _, m := range []proto.Message{&chatdv1.Chat{}, &chatdv1.Message{}, &chatdv1.ChatUpdateNotification{}, &chatdv1.SendMessageRequest{}} {
		if n := m.ProtoReflect().Descriptor().ParentFile().Enums().Len(); n != 0 {
			t.Errorf("%s declares %d enums", m.ProtoReflect().Descriptor().ParentFile().Path(), n)
		}
	}
}
