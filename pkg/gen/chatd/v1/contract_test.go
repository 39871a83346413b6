package chatdv1_test

import (
	"encoding/json"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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
		Status:            chatdv1.ChatStatus_CHAT_STATUS_RUNNING,
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
	chat := &chatdv1.Chat{Id: "c", OrganizationId: "o", OwnerId: "u", RootChatId: "c", LastError: proto.String("boom")}
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
