package modelconfig

import "github.com/chatd/chatd/pkg/db/queries"

// Reader resolves model configuration through one query handle: a
// transition bundle's transaction (tx.Queries()) inside the bundle, the
// pool's outside it. Code running inside a bundle takes a Reader, never a
// Store: a Store reads through the pool, and a goroutine that holds a
// bundle's connection and waits for another one can wedge the pool.
type Reader struct {
	q *queries.Queries
}

// NewReader returns a Reader over q.
func NewReader(q *queries.Queries) Reader { return Reader{q: q} }

// Reader returns a Reader over the store's pool, for use outside any
// transaction.
func (s *Store) Reader() Reader { return Reader{q: queries.New(s.pool)} }
