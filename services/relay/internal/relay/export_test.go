package relay

import "github.com/google/uuid"

// WatchShares is the number of calls sharing the watch of chat (0 when
// it is not watched), for tests that wait on a control message's effect.
func (s *Server) WatchShares(chat uuid.UUID) int {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if w := s.watched[chat]; w != nil {
		return w.subs
	}
	return 0
}
