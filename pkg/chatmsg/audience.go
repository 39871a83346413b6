package chatmsg

// The audiences of Part.Audience.
const (
	AudienceModel = "model"
	AudienceUser  = "user"
)

// AudienceText is a text part for one audience, produced by the lifecycle
// hook event hook (e.g. a user_prompt_submit model_context).
func AudienceText(audience, hook, text string) Part {
	return Part{Type: PartText, Text: text, Hook: hook, Audience: audience}
}

// SplitAudience separates the parts for one audience from the rest:
// modelOnly and userOnly carry them with Audience cleared (their row's
// visibility says it); rest keeps everything else in order.
func (c Content) SplitAudience() (rest, modelOnly, userOnly Content) {
	for _, p := range c {
		switch p.Audience {
		case AudienceModel:
			p.Audience = ""
			modelOnly = append(modelOnly, p)
		case AudienceUser:
			p.Audience = ""
			userOnly = append(userOnly, p)
		default:
			rest = append(rest, p)
		}
	}
	return rest, modelOnly, userOnly
}

// ForUser is c without the parts only the model may see.
func (c Content) ForUser() Content {
	out := make(Content, 0, len(c))
	for _, p := range c {
		if p.Audience != AudienceModel {
			out = append(out, p)
		}
	}
	return out
}
