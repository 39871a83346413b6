package acquire

import chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"

// Notified hands l a chat:ownership notification as its subscription does.
func (l *Loop) Notified(n *chatdv1.OwnershipNotification) { l.notified(n) }

// PendingHints is the number of hints queued for the loop.
func (l *Loop) PendingHints() int { return len(l.hints) }
