package chatstate

// Transition names a state-machine transition as the spec's diagrams label
// it. SendMessage and SetArchived carry their argument in the label because
// the diagrams distinguish landings by it.
type Transition string

// The 21 transitions (SendMessage and SetArchived in their labelled forms).
const (
	Create                  Transition = "Create"
	SetArchivedTrue         Transition = "SetArchived(true)"
	SetArchivedFalse        Transition = "SetArchived(false)"
	SendMessageQueue        Transition = "SendMessage(queue)"
	SendMessageInterrupt    Transition = "SendMessage(interrupt)"
	EditMessage             Transition = "EditMessage"
	DeleteQueuedMessage     Transition = "DeleteQueuedMessage"
	PromoteQueuedMessage    Transition = "PromoteQueuedMessage"
	Interrupt               Transition = "Interrupt"
	CompleteRequiresAction  Transition = "CompleteRequiresAction"
	RequestCompaction       Transition = "RequestCompaction"
	ClearContext            Transition = "ClearContext"
	Acquire                 Transition = "Acquire(worker_id, runner_id)"
	Abandon                 Transition = "Abandon"
	CommitStep              Transition = "CommitStep"
	EnterRequiresAction     Transition = "EnterRequiresAction"
	FinishInterruption      Transition = "FinishInterruption"
	RecordGenerationAttempt Transition = "RecordGenerationAttempt"
	RecordRetryState        Transition = "RecordRetryState"
	FinishTurn              Transition = "FinishTurn"
	FinishError             Transition = "FinishError"
	CancelRequiresAction    Transition = "CancelRequiresAction"
	ReconcileInvalidState   Transition = "ReconcileInvalidState"
)

// Transitions lists every transition in its labelled form.
var Transitions = []Transition{
	Create, SetArchivedTrue, SetArchivedFalse, SendMessageQueue, SendMessageInterrupt,
	EditMessage, DeleteQueuedMessage, PromoteQueuedMessage, Interrupt,
	CompleteRequiresAction, RequestCompaction, ClearContext, Acquire, Abandon,
	CommitStep, EnterRequiresAction, FinishInterruption, RecordGenerationAttempt,
	RecordRetryState, FinishTurn, FinishError, CancelRequiresAction, ReconcileInvalidState,
}

// base is the label a diagram uses when a transition's argument does not
// change its landing ("W --> R0: SendMessage" covers both behaviours).
func (t Transition) base() Transition {
	switch t {
	case SendMessageQueue, SendMessageInterrupt:
		return "SendMessage"
	}
	return t
}

// Variants: the outcome conditions of transitions with several landings,
// worded as the diagrams word them.
const (
	VariantRemovedLast       = "removed last queued"
	VariantQueueNonEmpty     = "queue still non-empty"
	VariantPromotedLast      = "promoted last queued"
	VariantQueueEmpty        = "queue empty"
	VariantPromotedHeadStill = "queue still non-empty after promoting head"
	VariantNoQueued          = "no queued messages"
	VariantQueued            = "queued messages"
	// VariantNoUserMessage is Create's landing in W that the spec's prose
	// adds (TODO #27111): initial history with no user message.
	VariantNoUserMessage = "no user message"
)

// Edge is one allowed transition: from a state, by a transition, in an
// outcome variant, to a state.
type Edge struct {
	Diagram    string // "execution" or "ownership"
	From       string
	Transition Transition
	Variant    string
	To         string
	// Prose marks an edge the spec's text adds to its diagrams.
	Prose bool
}

// Edges is the only authority on which (state, transition) pairs are allowed
// and where they land. It is transcribed from the two stateDiagram-v2 blocks
// of the architecture spec, in their order (pkg/chatstate/testdata/
// transitions.tsv is the same list and a test keeps them equal), plus the
// landings the prose adds.
var Edges = []Edge{
	{"execution", "N", Create, "", "R0", false},
	{"execution", "W", "SendMessage", "", "R0", false},
	{"execution", "W", EditMessage, "", "R0", false},
	{"execution", "W", RequestCompaction, "", "R0", false},
	{"execution", "W", ClearContext, "", "W", false},
	{"execution", "W", FinishError, "", "E0", false},
	{"execution", "W", SetArchivedTrue, "", "XW", false},
	{"execution", "E0", "SendMessage", "", "R0", false},
	{"execution", "E0", EditMessage, "", "R0", false},
	{"execution", "E0", RequestCompaction, "", "R0", false},
	{"execution", "E0", ClearContext, "", "W", false},
	{"execution", "E0", SetArchivedTrue, "", "XE0", false},
	{"execution", "E1", "SendMessage", "", "R1", false},
	{"execution", "E1", EditMessage, "", "R0", false},
	{"execution", "E1", RequestCompaction, "", "R1", false},
	{"execution", "E1", DeleteQueuedMessage, VariantRemovedLast, "E0", false},
	{"execution", "E1", DeleteQueuedMessage, VariantQueueNonEmpty, "E1", false},
	{"execution", "E1", PromoteQueuedMessage, VariantPromotedLast, "R0", false},
	{"execution", "E1", PromoteQueuedMessage, VariantQueueNonEmpty, "R1", false},
	{"execution", "E1", SetArchivedTrue, "", "XE1", false},
	{"execution", "R0", RecordGenerationAttempt, "", "R0", false},
	{"execution", "R0", RecordRetryState, "", "R0", false},
	{"execution", "R0", CommitStep, "", "R0", false},
	{"execution", "R0", EnterRequiresAction, "", "A0", false},
	{"execution", "R0", Interrupt, "", "I0", false},
	{"execution", "R0", SendMessageInterrupt, "", "I1", false},
	{"execution", "R0", EditMessage, "", "R0", false},
	{"execution", "R0", FinishTurn, VariantQueueEmpty, "W", false},
	{"execution", "R0", FinishError, "", "E0", false},
	{"execution", "R0", SendMessageQueue, "", "R1", false},
	{"execution", "R1", RecordGenerationAttempt, "", "R1", false},
	{"execution", "R1", RecordRetryState, "", "R1", false},
	{"execution", "R1", CommitStep, "", "R1", false},
	{"execution", "R1", EnterRequiresAction, "", "A1", false},
	{"execution", "R1", Interrupt, "", "I1", false},
	{"execution", "R1", SendMessageInterrupt, "", "I1", false},
	{"execution", "R1", EditMessage, "", "R0", false},
	{"execution", "R1", FinishError, "", "E1", false},
	{"execution", "R1", SendMessageQueue, "", "R1", false},
	{"execution", "R1", DeleteQueuedMessage, VariantRemovedLast, "R0", false},
	{"execution", "R1", DeleteQueuedMessage, VariantQueueNonEmpty, "R1", false},
	{"execution", "R1", PromoteQueuedMessage, "", "I1", false},
	{"execution", "R1", FinishTurn, VariantPromotedLast, "R0", false},
	{"execution", "R1", FinishTurn, VariantPromotedHeadStill, "R1", false},
	{"execution", "I0", "SendMessage", "", "I1", false},
	{"execution", "I0", EditMessage, "", "R0", false},
	{"execution", "I0", FinishInterruption, "", "W", false},
	{"execution", "I1", "SendMessage", "", "I1", false},
	{"execution", "I1", EditMessage, "", "R0", false},
	{"execution", "I1", DeleteQueuedMessage, VariantRemovedLast, "I0", false},
	{"execution", "I1", DeleteQueuedMessage, VariantQueueNonEmpty, "I1", false},
	{"execution", "I1", PromoteQueuedMessage, "", "I1", false},
	{"execution", "I1", FinishInterruption, VariantPromotedLast, "R0", false},
	{"execution", "I1", FinishInterruption, VariantPromotedHeadStill, "R1", false},
	{"execution", "A0", CompleteRequiresAction, "", "R0", false},
	{"execution", "A0", Interrupt, "", "R0", false},
	{"execution", "A0", CancelRequiresAction, "", "R0", false},
	{"execution", "A0", SendMessageQueue, "", "A1", false},
	{"execution", "A0", SendMessageInterrupt, "", "R1", false},
	{"execution", "A0", EditMessage, "", "R0", false},
	{"execution", "A1", CompleteRequiresAction, "", "R1", false},
	{"execution", "A1", Interrupt, "", "R1", false},
	{"execution", "A1", CancelRequiresAction, "", "R1", false},
	{"execution", "A1", SendMessageQueue, "", "A1", false},
	{"execution", "A1", SendMessageInterrupt, "", "R1", false},
	{"execution", "A1", EditMessage, "", "R0", false},
	{"execution", "A1", DeleteQueuedMessage, VariantRemovedLast, "A0", false},
	{"execution", "A1", DeleteQueuedMessage, VariantQueueNonEmpty, "A1", false},
	{"execution", "A1", PromoteQueuedMessage, VariantPromotedLast, "R0", false},
	{"execution", "A1", PromoteQueuedMessage, VariantQueueNonEmpty, "R1", false},
	{"execution", "XW", SetArchivedFalse, "", "W", false},
	{"execution", "XE0", SetArchivedFalse, "", "E0", false},
	{"execution", "XE1", SetArchivedFalse, "", "E1", false},
	{"execution", "[Invalid]", ReconcileInvalidState, VariantNoQueued, "E0", false},
	{"execution", "[Invalid]", ReconcileInvalidState, VariantQueued, "E1", false},
	{"ownership", "U", Acquire, "", "O", false},
	{"ownership", "O", Acquire, "", "O", false},
	{"ownership", "O", Abandon, "", "U", false},

	// Prose: "Create(initialMessages) now lands in waiting instead of running
	// when the initial history carries no user message".
	{"execution", "N", Create, VariantNoUserMessage, "W", true},
}

// edgesFrom returns the edges leaving from for transition t, matching both
// its labelled and its base form.
func edgesFrom(diagram, from string, t Transition) []Edge {
	var out []Edge
	for _, e := range Edges {
		if e.Diagram == diagram && e.From == from && (e.Transition == t || e.Transition == t.base()) {
			out = append(out, e)
		}
	}
	return out
}

// Allowed reports whether t may be applied in execution state s.
func Allowed(s State, t Transition) bool {
	return len(edgesFrom("execution", string(s), t)) > 0
}

// AllowedOwnership reports whether t may be applied in ownership state o.
func AllowedOwnership(o Ownership, t Transition) bool {
	return len(edgesFrom("ownership", string(o), t)) > 0
}

// Landing returns where t lands from s in the given variant ("" when t has
// a single landing from s).
func Landing(s State, t Transition, variant string) (State, bool) {
	for _, e := range edgesFrom("execution", string(s), t) {
		if e.Variant == variant {
			return State(e.To), true
		}
	}
	return "", false
}

// ownershipTransition reports whether t belongs to the ownership diagram.
func ownershipTransition(t Transition) bool { return t == Acquire || t == Abandon }
