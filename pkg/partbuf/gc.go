package partbuf

import "github.com/jonboulle/clockwork"

func (b *Buffer) gcLoop(ticker clockwork.Ticker) {
	defer b.wg.Done()
	defer ticker.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-ticker.Chan():
			b.collect()
		}
	}
}

// collect drops the closed episodes that were closed at least gcDelay ago
// and have no subscriber, and returns how many it dropped.
func (b *Buffer) collect() int {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for ep, e := range b.episodes {
		if e.closed && e.subscribers == 0 && now.Sub(e.closedAt) >= b.gcDelay {
			delete(b.episodes, ep)
			n++
		}
	}
	return n
}
