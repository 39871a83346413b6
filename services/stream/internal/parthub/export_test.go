package parthub

import "github.com/google/uuid"

// Applied is how many parts the upstream of (chat, worker) has taken and
// applied (or dropped): a test's barrier, since a part taken from the
// upstream's channel is published only after its batch.
func (h *Hub) Applied(chat, worker uuid.UUID) int64 {
	h.mu.Lock()
	u := h.ups[key{chat: chat, worker: worker}]
	h.mu.Unlock()
	if u == nil {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.received
}
