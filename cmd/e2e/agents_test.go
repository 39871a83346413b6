package e2e_test

// Subagents and project memory end to end: the REST API and a worker
// running the scripted model, each served in process on its own loopback
// ports, over a fresh database and an in-process NATS server.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/cmd/internal/inproctest"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// agentStack is an api and a worker (inproctest) with a token of a fresh
// user and organization.
type agentStack struct {
	*inproctest.Stack
	t     *testing.T
	token string
}

// startAgentStack starts the stack; extra holds further CHATD_* settings.
func startAgentStack(t *testing.T, extra ...string) *agentStack {
	t.Helper()
	env := map[string]string{}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	st := inproctest.Start(t, inproctest.Options{Env: env})
	return &agentStack{Stack: st, t: t, token: st.Token(uuid.New(), uuid.New(), false)}
}

// call sends a JSON request and decodes the JSON answer; it fails the test
// unless the status is want.
func (s *agentStack) call(method, path string, body any, want int) map[string]any {
	s.t.Helper()
	return s.Call(s.token, method, path, body, want)
}

func text(s string) map[string]any {
	return map[string]any{"content": []map[string]any{{"type": "text", "text": s}}}
}

// createChat creates a chat with prompt (in project when not empty).
func (s *agentStack) createChat(prompt, project string) string {
	body := text(prompt)
	if project != "" {
		body["project_id"] = project
	}
	return s.call("POST", "/api/v2/chats", body, http.StatusCreated)["id"].(string)
}

func (s *agentStack) chat(id string) map[string]any {
	return s.call("GET", "/api/v2/chats/"+id, nil, http.StatusOK)
}

// waitIdle waits until the chat is waiting (its turn finished).
func (s *agentStack) waitIdle(id string) map[string]any {
	s.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		c := s.chat(id)
		if c["status"] == "waiting" {
			return c
		}
		select {
		case <-tick.C:
		case <-deadline:
			msgs := s.call("GET", "/api/v2/chats/"+id+"/messages", nil, http.StatusOK)
			s.t.Fatalf("chat %s never became waiting: %v\nmessages: %v", id, c, msgs)
		}
	}
}

// toolResult is one tool-result part of a chat's history.
type toolResult struct {
	Name    string
	IsError bool
	Result  map[string]any
}

// toolResults lists the chat's tool results, oldest first.
func (s *agentStack) toolResults(id string) []toolResult {
	msgs := s.call("GET", "/api/v2/chats/"+id+"/messages", nil, http.StatusOK)["messages"].([]any)
	var out []toolResult
	for _, m := range msgs {
		for _, p := range m.(map[string]any)["content"].([]any) {
			part := p.(map[string]any)
			if part["type"] != "tool-result" {
				continue
			}
			r := toolResult{Name: part["tool_name"].(string)}
			r.IsError, _ = part["is_error"].(bool)
			r.Result, _ = part["result"].(map[string]any)
			out = append(out, r)
		}
	}
	return out
}

// lastResult is the chat's newest tool result, which must be of tool name.
func (s *agentStack) lastResult(id, name string) toolResult {
	s.t.Helper()
	rs := s.toolResults(id)
	require.NotEmpty(s.t, rs, "chat %s has no tool result", id)
	r := rs[len(rs)-1]
	require.Equal(s.t, name, r.Name)
	return r
}

// assistantTexts are the chat's assistant replies, oldest first.
func (s *agentStack) assistantTexts(id string) []string {
	msgs := s.call("GET", "/api/v2/chats/"+id+"/messages", nil, http.StatusOK)["messages"].([]any)
	var out []string
	for _, m := range msgs {
		msg := m.(map[string]any)
		if msg["role"] != "assistant" {
			continue
		}
		var b strings.Builder
		for _, p := range msg["content"].([]any) {
			if t, ok := p.(map[string]any)["text"].(string); ok {
				b.WriteString(t)
			}
		}
		out = append(out, b.String())
	}
	return out
}

func toolLine(name string, args any) string {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("::tool %s %s", name, b)
}

// TestSubagentsEndToEnd: a parent spawns a child through spawn_agent; the
// child (a chat with parent_chat_id and root_chat_id) runs its own scripted
// prompt on the worker; wait_agent returns the child's reply; list_agents
// lists it; archiving the parent archives the child.
func TestSubagentsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startAgentStack(t)

	parent := s.createChat(toolLine("spawn_agent", map[string]any{"prompt": "::reply the child's answer", "title": "helper"}), "")
	s.waitIdle(parent)
	spawned := s.lastResult(parent, "spawn_agent")
	require.False(t, spawned.IsError, "%v", spawned.Result)
	childID, _ := spawned.Result["chat_id"].(string)
	require.NotEmpty(t, childID, "%v", spawned.Result)
	require.Equal(t, "parent", spawned.Result["model"], "without arguments or overrides the child inherits the parent's model")

	child := s.chat(childID)
	require.Equal(t, parent, child["parent_chat_id"])
	require.Equal(t, parent, child["root_chat_id"])
	require.Equal(t, "helper", child["title"])
	require.Equal(t, s.chat(parent)["last_model_config_id"], child["last_model_config_id"])

	s.call("POST", "/api/v2/chats/"+parent+"/messages", text(toolLine("wait_agent", map[string]any{"chat_id": childID, "timeout_seconds": 60})), http.StatusCreated)
	s.waitIdle(parent)
	waited := s.lastResult(parent, "wait_agent")
	require.False(t, waited.IsError, "%v", waited.Result)
	require.Equal(t, "the child's answer", waited.Result["reply"])
	require.Equal(t, "waiting", waited.Result["status"])
	require.Equal(t, []string{"the child's answer"}, s.assistantTexts(childID))

	s.call("POST", "/api/v2/chats/"+parent+"/messages", text("::tool list_agents {}"), http.StatusCreated)
	s.waitIdle(parent)
	listed := s.lastResult(parent, "list_agents")
	agents := listed.Result["agents"].([]any)
	require.Len(t, agents, 1)
	require.Equal(t, childID, agents[0].(map[string]any)["chat_id"])

	// The child is no root: it gets no subagent tools.
	s.call("POST", "/api/v2/chats/"+childID+"/messages", text("::tool spawn_agent {\"prompt\":\"x\"}"), http.StatusCreated)
	s.waitIdle(childID)
	nested := s.lastResult(childID, "spawn_agent")
	require.True(t, nested.IsError)
	require.Contains(t, nested.Result["error"], "unknown tool")

	s.call("PATCH", "/api/v2/chats/"+parent, map[string]any{"archived": true}, http.StatusOK)
	require.Equal(t, true, s.chat(parent)["archived"])
	require.Equal(t, true, s.chat(childID)["archived"], "archiving the parent archives its family")
}

// TestSubagentsUseTheirOwnPool: with one root slot, held by the parent
// while it waits, the child still runs: it takes a slot of the subagent
// pool.
func TestSubagentsUseTheirOwnPool(t *testing.T) {
	t.Parallel()
	s := startAgentStack(t, "CHATD_MAX_ROOT_CHATS=1", "CHATD_MAX_SUBAGENT_CHATS=1")
	parent := s.createChat(toolLine("spawn_agent", map[string]any{"prompt": "::stream 5 20"}), "")
	s.waitIdle(parent)
	childID := s.lastResult(parent, "spawn_agent").Result["chat_id"].(string)
	s.call("POST", "/api/v2/chats/"+parent+"/messages", text(toolLine("wait_agent", map[string]any{"chat_id": childID, "timeout_seconds": 60})), http.StatusCreated)
	s.waitIdle(parent)
	waited := s.lastResult(parent, "wait_agent")
	require.False(t, waited.IsError, "%v", waited.Result)
	require.Nil(t, waited.Result["timed_out"])
	require.Equal(t, "tok1 tok2 tok3 tok4 tok5", waited.Result["reply"])
}

// TestSubagentMessageAndInterrupt: message_agent queues a new task on an
// idle child that then answers it; interrupt_agent (and its alias
// close_agent) on an idle child reports it without interrupting.
func TestSubagentMessageAndInterrupt(t *testing.T) {
	t.Parallel()
	s := startAgentStack(t)
	parent := s.createChat(toolLine("spawn_agent", map[string]any{"prompt": "::reply first"}), "")
	s.waitIdle(parent)
	childID := s.lastResult(parent, "spawn_agent").Result["chat_id"].(string)
	s.waitIdle(childID)

	s.call("POST", "/api/v2/chats/"+parent+"/messages", text(toolLine("message_agent", map[string]any{"chat_id": childID, "message": "::reply second"})), http.StatusCreated)
	s.waitIdle(parent)
	sent := s.lastResult(parent, "message_agent")
	require.False(t, sent.IsError, "%v", sent.Result)
	require.Equal(t, false, sent.Result["queued"], "an idle child takes the message at once")
	s.waitIdle(childID)
	require.Equal(t, []string{"first", "second"}, s.assistantTexts(childID))

	s.call("POST", "/api/v2/chats/"+parent+"/messages", text(toolLine("close_agent", map[string]any{"chat_id": childID})), http.StatusCreated)
	s.waitIdle(parent)
	closed := s.lastResult(parent, "close_agent")
	require.False(t, closed.IsError, "%v", closed.Result)
	require.Equal(t, false, closed.Result["interrupted"])
	require.Equal(t, "waiting", closed.Result["status"])

	// A chat that is not a child is refused.
	other := s.createChat("::reply alone", "")
	s.waitIdle(other)
	s.call("POST", "/api/v2/chats/"+parent+"/messages", text(toolLine("wait_agent", map[string]any{"chat_id": other})), http.StatusCreated)
	s.waitIdle(parent)
	refused := s.lastResult(parent, "wait_agent")
	require.True(t, refused.IsError)
	require.Contains(t, refused.Result["error"], "not a subagent of this chat")
}

// TestProjectMemoryEndToEnd: projects through the API; a root chat in a
// project saves, reads and deletes memories that another chat of the
// project sees (the index is in read_memory's description too); saves
// carry a prune reminder from 180 memories and a new name is refused at
// 200; chats outside a project and subagents have no memory tools.
func TestProjectMemoryEndToEnd(t *testing.T) {
	t.Parallel()
	s := startAgentStack(t)
	project := s.call("POST", "/api/v2/projects", map[string]any{"name": "chatd"}, http.StatusCreated)
	projectID := project["id"].(string)
	require.Equal(t, "chatd", project["name"])
	s.call("POST", "/api/v2/projects", map[string]any{"name": "chatd"}, http.StatusConflict)
	listed := s.call("GET", "/api/v2/projects", nil, http.StatusOK)["projects"].([]any)
	require.Len(t, listed, 1)
	s.call("POST", "/api/v2/chats", map[string]any{"content": text("x")["content"], "project_id": uuid.NewString()}, http.StatusNotFound)

	writer := s.createChat(toolLine("save_memory", map[string]any{"name": "build", "title": "How to build", "content": "run make"}), projectID)
	require.Equal(t, projectID, s.chat(writer)["project_id"])
	s.waitIdle(writer)
	saved := s.lastResult(writer, "save_memory")
	require.False(t, saved.IsError, "%v", saved.Result)
	require.Equal(t, true, saved.Result["created"])
	require.EqualValues(t, 1, saved.Result["count"])
	require.Nil(t, saved.Result["reminder"])

	reader := s.createChat(toolLine("read_memory", map[string]any{"name": "build"}), projectID)
	s.waitIdle(reader)
	read := s.lastResult(reader, "read_memory")
	require.False(t, read.IsError, "%v", read.Result)
	require.Equal(t, "run make", read.Result["content"])
	require.Equal(t, "How to build", read.Result["title"])

	// Outside a project, and in a subagent of a project chat, there are no
	// memory tools.
	outside := s.createChat("::tool read_memory {}", "")
	s.waitIdle(outside)
	require.Contains(t, s.lastResult(outside, "read_memory").Result["error"], "unknown tool")
	spawner := s.createChat(toolLine("spawn_agent", map[string]any{"prompt": "::tool read_memory {}"}), projectID)
	s.waitIdle(spawner)
	sub := s.lastResult(spawner, "spawn_agent").Result["chat_id"].(string)
	s.waitIdle(sub)
	require.Contains(t, s.lastResult(sub, "read_memory").Result["error"], "unknown tool")
	require.Nil(t, s.chat(sub)["project_id"], "a subagent is in no project")

	s.call("POST", "/api/v2/chats/"+reader+"/messages", text(toolLine("delete_memory", map[string]any{"name": "build"})), http.StatusCreated)
	s.waitIdle(reader)
	deleted := s.lastResult(reader, "delete_memory")
	require.False(t, deleted.IsError, "%v", deleted.Result)
	require.EqualValues(t, 0, deleted.Result["count"])
	s.call("POST", "/api/v2/chats/"+reader+"/messages", text(toolLine("read_memory", map[string]any{"name": "build"})), http.StatusCreated)
	s.waitIdle(reader)
	require.True(t, s.lastResult(reader, "read_memory").IsError, "the memory is gone")

	// 179 memories, then a save through the agent is the 180th: reminded.
	seed(t, s.Pool, projectID, 179)
	s.call("POST", "/api/v2/chats/"+writer+"/messages", text(toolLine("save_memory", map[string]any{"name": "m180", "content": "c"})), http.StatusCreated)
	s.waitIdle(writer)
	r180 := s.lastResult(writer, "save_memory")
	require.False(t, r180.IsError, "%v", r180.Result)
	require.EqualValues(t, 180, r180.Result["count"])
	require.Contains(t, r180.Result["reminder"], "prune")

	// At 200 a new name is refused, an existing one still saves.
	seedFrom(t, s.Pool, projectID, 179, 20)
	s.call("POST", "/api/v2/chats/"+writer+"/messages", text(toolLine("save_memory", map[string]any{"name": "one-too-many", "content": "c"})), http.StatusCreated)
	s.waitIdle(writer)
	full := s.lastResult(writer, "save_memory")
	require.True(t, full.IsError)
	require.Contains(t, full.Result["error"], "full (200 of 200")
	s.call("POST", "/api/v2/chats/"+writer+"/messages", text(toolLine("save_memory", map[string]any{"name": "m180", "content": "folded"})), http.StatusCreated)
	s.waitIdle(writer)
	update := s.lastResult(writer, "save_memory")
	require.False(t, update.IsError, "%v", update.Result)
	require.Equal(t, false, update.Result["created"])
	require.EqualValues(t, 200, update.Result["count"])
}

// seed inserts n memories named seed-000... into project.
func seed(t *testing.T, pool *pgxpool.Pool, project string, n int) { seedFrom(t, pool, project, 0, n) }

func seedFrom(t *testing.T, pool *pgxpool.Pool, project string, from, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
INSERT INTO chat_project_memories (project_id, name, title, content)
SELECT $1::uuid, 'seed-' || lpad(i::text, 3, '0'), 'seeded', 'content'
FROM generate_series($2::int, $3::int - 1) AS i`, project, from, from+n)
	require.NoError(t, err)
}
