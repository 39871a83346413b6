package chatstate

import "github.com/chatd/chatd/pkg/chatmsg"

// HookEffects are the transcript messages of a lifecycle hook response's
// effects outside a prompt (a prompt carries its own as parts, see
// chatmsg.HookNotice): model_context becomes HookContextMessage and
// user_message HookNoticeMessage, in that order; empty ones are skipped.
func HookEffects(event, modelContext, userMessage string) []NewMessage {
	var out []NewMessage
	if modelContext != "" {
		out = append(out, HookContextMessage(event, modelContext))
	}
	if userMessage != "" {
		out = append(out, HookNoticeMessage(event, userMessage))
	}
	return out
}

// HookContextMessage is a model-only user message holding one hook-context
// part: the model reads it as input (and answers it where the turn owes a
// response, e.g. a stop continuation); the part type says it came from
// policy, and clients never see it.
func HookContextMessage(event, text string) NewMessage {
	return NewMessage{Role: RoleUser, Visibility: VisibleToModel, Content: chatmsg.Content{chatmsg.HookContext(event, text)}}
}

// HookNoticeMessage is a user-only system message holding one hook-notice
// part: clients show it as a policy notice. Its role keeps it from being
// taken for something the user typed: it is no turn's prompt and cannot
// be edited.
func HookNoticeMessage(event, text string) NewMessage {
	return NewMessage{Role: RoleSystem, Visibility: VisibleToUser, Content: chatmsg.Content{chatmsg.HookNotice(event, text)}}
}
