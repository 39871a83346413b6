package featuretest_test

// Model overrides end to end through the REST API and a worker running the
// scripted model: the organization's and the caller's subagent overrides
// (spec "Reasoning effort", subagent precedence), the caller's personal
// compaction threshold, and the project memory guidance block in the
// system prompt of root chats in a project.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// ovTool is a user message that makes the scripted model call tool name.
func ovTool(name string, args map[string]any) string {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("::tool %s %s", name, b)
}

// ovConfig creates an enabled scripted model config (admin) and returns
// its ID.
func (c *client) ovConfig(name string, enabled bool) string {
	c.s.t.Helper()
	code, out := c.do("POST", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs", c.org),
		fmt.Sprintf(`{"provider_id":"00000000-0000-4000-8000-000000000001","model":"scripted","display_name":%q,"context_limit":10000,"enabled":%t}`, name, enabled))
	require.Contains(c.s.t, []int{http.StatusOK, http.StatusCreated}, code, "%v", out)
	return out["id"].(string)
}

// ovSpawned is what a spawn_agent call gave: the rule that chose the
// model, and the child's model config and first prompt's effort.
type ovSpawned struct {
	Source string
	Model  string
	Effort string // "" when the prompt carries none
}

// ovSpawn has a new root chat of c call spawn_agent with args and returns
// the child's model and effort.
func (c *client) ovSpawn(args map[string]any) ovSpawned {
	c.s.t.Helper()
	args["prompt"] = "::reply child"
	parent := c.newChat(ovTool("spawn_agent", args))
	c.waitStatus(parent, "waiting")
	var res map[string]any
	for _, m := range c.messages(parent) {
		for _, p := range parts(m) {
			if p["type"] == "tool-result" && p["tool_name"] == "spawn_agent" {
				require.NotEqual(c.s.t, true, p["is_error"], "spawn_agent failed: %v", p["result"])
				res, _ = p["result"].(map[string]any)
			}
		}
	}
	require.NotNil(c.s.t, res, "no spawn_agent result")
	child := res["chat_id"].(string)
	out := ovSpawned{Source: res["model"].(string), Model: c.chat(child)["last_model_config_id"].(string)}
	for _, m := range c.messages(child) {
		if m["role"] == "user" {
			out.Effort, _ = m["reasoning_effort"].(string)
			break
		}
	}
	return out
}

// ovSpawnError has a new root chat of c call spawn_agent with args, which
// must fail, and returns the tool error.
func (c *client) ovSpawnError(args map[string]any) string {
	c.s.t.Helper()
	args["prompt"] = "::reply child"
	parent := c.newChat(ovTool("spawn_agent", args))
	c.waitStatus(parent, "waiting")
	for _, m := range c.messages(parent) {
		for _, p := range parts(m) {
			if p["type"] == "tool-result" && p["tool_name"] == "spawn_agent" {
				require.Equal(c.s.t, true, p["is_error"], "spawn_agent succeeded: %v", p["result"])
				return fmt.Sprint(p["result"])
			}
		}
	}
	c.s.t.Fatal("no spawn_agent result")
	return ""
}

// ovStatus sends a request that must fail with status code and a message
// containing want.
func (c *client) ovStatus(code int, method, path, body, want string) {
	c.s.t.Helper()
	got, out := c.do(method, path, body)
	require.Equal(c.s.t, code, got, "%s %s %s: %v", method, path, body, out)
	require.Contains(c.s.t, fmt.Sprint(out), want, "%s %s %s", method, path, body)
}

// TestSubagentModelOverridesEndToEnd: an admin sets the organization's
// subagent override (model and effort) through the API; a member's
// personal override beats it, for that member only; explicit spawn_agent
// arguments beat both, each on its own; the overrides are per subagent
// type; chat_default stops at inheritance, deployment_default and an
// unusable personal override defer to the organization's.
func TestSubagentModelOverridesEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	org := uuid.New()
	admin := s.client(org, true)
	member, colleague := s.client(org, false), s.client(org, false)
	parentModel := admin.defaultConfig()["id"].(string)
	orgModel, personalModel, explicitModel := admin.ovConfig("org", true), admin.ovConfig("personal", true), admin.ovConfig("explicit", true)
	disabledModel := admin.ovConfig("disabled", false)
	orgPath := fmt.Sprintf("/api/v2/organizations/%s/chats/model-overrides/", org)
	mePath := "/api/v2/users/me/chats/model-overrides/"

	// Without overrides the child inherits the parent's model.
	got := member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "parent", Model: parentModel}, got)

	// The organization endpoint is for admins only.
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		code, body := member.do(m, orgPath+"subagent-general", `{"model_config_id":"`+orgModel+`"}`)
		require.Equal(t, http.StatusForbidden, code, "%s by a non-admin: %v", m, body)
	}
	admin.ovStatus(http.StatusNotFound, "GET", orgPath+"subagent-general", "", "no general model override")
	admin.ovStatus(http.StatusBadRequest, "PUT", orgPath+"subagent-other", `{"model_config_id":"`+orgModel+`"}`, "is not one of compaction, subagent-general, subagent-explore")
	admin.ovStatus(http.StatusBadRequest, "PUT", orgPath+"subagent-general", `{}`, "model_config_id is required")
	admin.ovStatus(http.StatusBadRequest, "PUT", orgPath+"subagent-general", `{"model_config_id":"`+orgModel+`","reasoning_effort":"extreme"}`, `reasoning_effort "extreme" is not one of none, minimal, low, medium, high, xhigh, max`)
	admin.ovStatus(http.StatusBadRequest, "PUT", orgPath+"subagent-general", `{"model_config_id":"`+disabledModel+`"}`, "is disabled")
	admin.ovStatus(http.StatusBadRequest, "PUT", orgPath+"compaction", `{"model_config_id":"`+orgModel+`","reasoning_effort":"high"}`, "reasoning_effort applies to the subagent contexts only")
	otherOrgModel := s.client(uuid.New(), true).defaultConfig()["id"].(string)
	admin.ovStatus(http.StatusBadRequest, "PUT", orgPath+"subagent-general", `{"model_config_id":"`+otherOrgModel+`"}`, "does not exist in this organization")

	set := admin.must(http.StatusOK, "PUT", orgPath+"subagent-general", `{"model_config_id":"`+orgModel+`","reasoning_effort":"high"}`)
	require.Equal(t, "subagent-general", set["context"])
	require.Equal(t, orgModel, set["model_config_id"])
	require.Equal(t, "high", set["reasoning_effort"])
	require.Equal(t, orgModel, admin.must(http.StatusOK, "GET", orgPath+"subagent-general", "")["model_config_id"])

	got = member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "organization override", Model: orgModel, Effort: "high"}, got)
	got = member.ovSpawn(map[string]any{"type": "explore"})
	require.Equal(t, ovSpawned{Source: "parent", Model: parentModel}, got, "the override is keyed by subagent type")

	// Personal overrides: validation first.
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{}`, "model_config_id is required")
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{"model_config_id":"nope"}`, `model_config_id "nope" is not a valid UUID`)
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{"model_config_id":"`+otherOrgModel+`"}`, "does not exist in this organization")
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{"model_config_id":"`+disabledModel+`"}`, "is disabled")
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{"model_config_id":"`+personalModel+`","reasoning_effort":"turbo"}`, `reasoning_effort "turbo" is not one of`)
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{"mode":"chat_default","model_config_id":"`+personalModel+`"}`, `mode "chat_default" takes no model_config_id`)
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"subagent-general", `{"mode":"fastest"}`, `mode "fastest" is not one of model, chat_default, deployment_default`)
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"compaction", `{"model_config_id":"`+personalModel+`"}`, "compaction-thresholds")
	member.ovStatus(http.StatusBadRequest, "PUT", mePath+"general", `{"model_config_id":"`+personalModel+`"}`, "is not one of subagent-general, subagent-explore")
	member.ovStatus(http.StatusNotFound, "GET", mePath+"subagent-general", "", "no personal general subagent model override")

	mine := member.must(http.StatusOK, "PUT", mePath+"subagent-general", `{"model_config_id":"`+personalModel+`","reasoning_effort":"low"}`)
	require.Equal(t, "model", mine["mode"])
	require.Equal(t, personalModel, mine["model_config_id"])
	require.Equal(t, member.user.String(), mine["user_id"])
	read := member.must(http.StatusOK, "GET", mePath+"subagent-general", "")
	require.Equal(t, "low", read["reasoning_effort"])

	// Personal beats organization, for its owner only.
	got = member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "personal override", Model: personalModel, Effort: "low"}, got)
	got = colleague.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "organization override", Model: orgModel, Effort: "high"}, got, "another member's personal override does not apply")

	// Explicit arguments beat both, each on its own.
	got = member.ovSpawn(map[string]any{"model_config_id": explicitModel})
	require.Equal(t, ovSpawned{Source: "explicit", Model: explicitModel}, got, "an explicit model runs at its config's default effort")
	got = member.ovSpawn(map[string]any{"reasoning_effort": "max"})
	require.Equal(t, ovSpawned{Source: "personal override", Model: personalModel, Effort: "max"}, got, "an explicit effort keeps the override's model")
	got = member.ovSpawn(map[string]any{"model_config_id": explicitModel, "reasoning_effort": "minimal"})
	require.Equal(t, ovSpawned{Source: "explicit", Model: explicitModel, Effort: "minimal"}, got)
	require.Contains(t, member.ovSpawnError(map[string]any{"model_config_id": disabledModel}), "disabled", "an unusable explicit model is a tool error")

	// Modes.
	member.must(http.StatusOK, "PUT", mePath+"subagent-general", `{"mode":"chat_default"}`)
	got = member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "parent", Model: parentModel}, got, "chat_default stops at inheritance")
	member.must(http.StatusOK, "PUT", mePath+"subagent-general", `{"mode":"deployment_default"}`)
	got = member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "organization override", Model: orgModel, Effort: "high"}, got, "deployment_default defers to the organization")

	// A personal model that becomes disabled falls through softly.
	member.must(http.StatusOK, "PUT", mePath+"subagent-general", `{"model_config_id":"`+personalModel+`"}`)
	admin.must(http.StatusOK, "PATCH", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs/%s", org, personalModel), `{"enabled":false}`)
	got = member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "organization override", Model: orgModel, Effort: "high"}, got)

	// Personal explore override; deleting overrides restores inheritance.
	member.must(http.StatusOK, "PUT", mePath+"subagent-explore", `{"model_config_id":"`+explicitModel+`","reasoning_effort":"medium"}`)
	got = member.ovSpawn(map[string]any{"type": "explore"})
	require.Equal(t, ovSpawned{Source: "personal override", Model: explicitModel, Effort: "medium"}, got)
	member.must(http.StatusOK, "DELETE", mePath+"subagent-explore", "")
	member.must(http.StatusOK, "DELETE", mePath+"subagent-explore", "") // idempotent
	member.ovStatus(http.StatusNotFound, "GET", mePath+"subagent-explore", "", "no personal explore")
	admin.must(http.StatusOK, "DELETE", orgPath+"subagent-general", "")
	admin.ovStatus(http.StatusNotFound, "GET", orgPath+"subagent-general", "", "no general model override")
	got = member.ovSpawn(map[string]any{})
	require.Equal(t, ovSpawned{Source: "parent", Model: parentModel}, got, "the personal model is disabled and the organization's unset")
}

// TestPersonalCompactionThresholdEndToEnd: the caller sets their personal
// compaction threshold for a model config through the API (validated);
// their chats on it compact at that threshold, earlier than the config's,
// and other members' chats do not; deleting it restores the config's.
func TestPersonalCompactionThresholdEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	org := uuid.New()
	admin := s.client(org, true)
	cfg := admin.setWindow(10000, 90) // the chat trigger at 9000
	owner, other := s.client(org, false), s.client(org, false)
	base := "/api/v2/users/me/chats/compaction-thresholds"
	path := base + "/" + cfg

	owner.ovStatus(http.StatusNotFound, "GET", path, "", "no personal compaction threshold")
	owner.ovStatus(http.StatusBadRequest, "PUT", path, `{}`, "threshold_percent is required")
	owner.ovStatus(http.StatusBadRequest, "PUT", path, `{"threshold_percent":0}`, "threshold_percent must be between 1 and 100")
	owner.ovStatus(http.StatusBadRequest, "PUT", path, `{"threshold_percent":101}`, "threshold_percent must be between 1 and 100")
	owner.ovStatus(http.StatusBadRequest, "PUT", base+"/nope", `{"threshold_percent":50}`, `model_config_id "nope" is not a valid UUID`)
	owner.ovStatus(http.StatusBadRequest, "PUT", base+"/"+uuid.NewString(), `{"threshold_percent":50}`, "does not exist in this organization")
	otherOrgModel := s.client(uuid.New(), true).defaultConfig()["id"].(string)
	owner.ovStatus(http.StatusBadRequest, "PUT", base+"/"+otherOrgModel, `{"threshold_percent":50}`, "does not exist in this organization")
	disabled := admin.ovConfig("disabled", false)
	owner.ovStatus(http.StatusBadRequest, "PUT", base+"/"+disabled, `{"threshold_percent":50}`, "is disabled")

	set := owner.must(http.StatusOK, "PUT", path, `{"threshold_percent":50}`)
	require.Equal(t, cfg, set["model_config_id"])
	require.EqualValues(t, 50, set["threshold_percent"])
	require.EqualValues(t, 50, owner.must(http.StatusOK, "GET", path, "")["threshold_percent"])
	listed := owner.must(http.StatusOK, "GET", base, "")["compaction_thresholds"].([]any)
	require.Len(t, listed, 1)
	require.Equal(t, cfg, listed[0].(map[string]any)["model_config_id"])
	require.Empty(t, other.must(http.StatusOK, "GET", base, "")["compaction_thresholds"], "thresholds are personal")

	mine, theirs := owner.newChat("::usage 6000 10\nfirst"), other.newChat("::usage 6000 10\nfirst")
	owner.waitStatus(mine, "waiting")
	other.waitStatus(theirs, "waiting")
	owner.send(mine, "second")
	other.send(theirs, "second")
	owner.waitStatus(mine, "waiting")
	other.waitStatus(theirs, "waiting")
	sums := summaries(owner.messages(mine))
	require.Len(t, sums, 1, "6000 reaches the owner's 50%")
	require.EqualValues(t, 50, sums[0]["threshold_percent"])
	require.EqualValues(t, 10000, sums[0]["trigger_context_limit_tokens"])
	require.Empty(t, summaries(other.messages(theirs)), "6000 is under the model's 90% for everyone else")

	owner.must(http.StatusOK, "DELETE", path, "")
	owner.must(http.StatusOK, "DELETE", path, "") // idempotent
	owner.ovStatus(http.StatusNotFound, "GET", path, "", "no personal compaction threshold")
	again := owner.newChat("::usage 6000 10\nfirst")
	owner.waitStatus(again, "waiting")
	owner.send(again, "second")
	owner.waitStatus(again, "waiting")
	require.Empty(t, summaries(owner.messages(again)), "without the personal threshold the config's 90% applies")
}

// TestProjectMemoryGuidance: a root chat in a project gets the memory
// guidance block in its system prompt; a chat outside a project and a
// subagent of a project chat do not.
func TestProjectMemoryGuidance(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	u := s.client(uuid.New(), false)
	project := u.must(http.StatusCreated, "POST", "/api/v2/projects", `{"name":"guided"}`)["id"].(string)
	systemOf := func(chat string) string {
		u.waitStatus(chat, "waiting")
		var last string
		for _, m := range u.messages(chat) {
			if m["role"] == "assistant" {
				last = ""
				for _, p := range parts(m) {
					if t, ok := p["text"].(string); ok {
						last += t
					}
				}
			}
		}
		return last
	}

	body := textBody("::system")
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &in))
	in["project_id"] = project
	b, err := json.Marshal(in)
	require.NoError(t, err)
	root := u.must(http.StatusCreated, "POST", "/api/v2/chats", string(b))["id"].(string)
	sys := systemOf(root)
	require.Contains(t, sys, "## Project memory")
	require.Contains(t, sys, "save_memory")
	require.Equal(t, 1, strings.Count(sys, "## Project memory"))

	outside := u.newChat("::system")
	require.NotContains(t, systemOf(outside), "## Project memory")

	in = map[string]any{"content": []map[string]string{{"type": "text", "text": ovTool("spawn_agent", map[string]any{"prompt": "::system"})}}, "project_id": project}
	b, err = json.Marshal(in)
	require.NoError(t, err)
	spawner := u.must(http.StatusCreated, "POST", "/api/v2/chats", string(b))["id"].(string)
	u.waitStatus(spawner, "waiting")
	var child string
	for _, m := range u.messages(spawner) {
		for _, p := range parts(m) {
			if p["tool_name"] == "spawn_agent" && p["type"] == "tool-result" {
				child, _ = p["result"].(map[string]any)["chat_id"].(string)
			}
		}
	}
	require.NotEmpty(t, child)
	childSys := systemOf(child)
	require.NotEmpty(t, childSys, "the subagent has a system prompt of its own")
	require.NotContains(t, childSys, "## Project memory", "subagents have no memory")
}
