package memory

import "github.com/chatd/chatd/pkg/db/queries"

// GuidanceHeading starts the memory guidance block.
const GuidanceHeading = "## Project memory"

// guidance is the system prompt's memory guidance block (spec "Project
// memory"). It is static, so the prompt prefix stays cacheable: the live
// index is in read_memory's description, not here.
const guidance = GuidanceHeading + `

This chat belongs to a project whose chats share a durable memory. Use the memory tools:
- At the start of a task, check the index in read_memory's description and read the memories that bear on it.
- Save with save_memory what a later chat of this project should know: facts about the project, decisions and their reasons, conventions, commands that work, the user's stated preferences. Do not save the details or progress of the current task, secrets, or anything you can cheaply rediscover.
- Keep memories few and current: update a memory by saving under its name, fold related facts into one, and delete with delete_memory what is wrong or stale.
- The project holds at most 200 memories; when save_memory reminds you to prune, delete or fold memories in the same turn.
- Memories may be out of date: when one contradicts what you observe, trust the observation and fix the memory.`

// Guidance returns the memory guidance block for chat's system prompt: the
// block for a root chat in a project, "" otherwise (those chats have no
// memory tools).
func Guidance(chat queries.Chat) string {
	if chat.ProjectID == nil || chat.ParentChatID != nil {
		return ""
	}
	return guidance
}

// WithGuidance is system with the memory guidance block of chat appended
// (separated by a blank line), or system unchanged when chat gets none.
func WithGuidance(system string, chat queries.Chat) string {
	g := Guidance(chat)
	switch {
	case g == "":
		return system
	case system == "":
		return g
	}
	return system + "\n\n" + g
}
