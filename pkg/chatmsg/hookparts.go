package chatmsg

// HookNotice returns a hook-notice part: the user_message a lifecycle hook
// consumer returned for event. Clients show it as a policy notice; the
// model never reads it.
func HookNotice(event, text string) Part {
	return Part{Type: PartHookNotice, Text: text, Hook: event}
}

// HookContext returns a hook-context part: the model_context a lifecycle
// hook consumer returned for event. The model reads it as text; clients
// never see it.
func HookContext(event, text string) Part {
	return Part{Type: PartHookContext, Text: text, Hook: event}
}

// IsHookPart reports whether p is a hook-notice or hook-context part, which
// only chatd writes: client-submitted content must not carry one.
func (p Part) IsHookPart() bool {
	return p.Type == PartHookNotice || p.Type == PartHookContext
}

// ForUser is c as clients see it: without hook-context parts.
func (c Content) ForUser() Content {
	out := make(Content, 0, len(c))
	for _, p := range c {
		if p.Type != PartHookContext {
			out = append(out, p)
		}
	}
	return out
}

// ForModel is c as the model reads it: without hook-notice parts, and with
// each hook-context part as a text part.
func (c Content) ForModel() Content {
	out := make(Content, 0, len(c))
	for _, p := range c {
		switch p.Type {
		case PartHookNotice:
		case PartHookContext:
			out = append(out, Text(p.Text))
		default:
			out = append(out, p)
		}
	}
	return out
}
