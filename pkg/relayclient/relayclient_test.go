package relayclient_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chatd/chatd/pkg/relayclient"
)

func TestConnIsSharedAndRefusedAfterClose(t *testing.T) {
	c := relayclient.New("127.0.0.1:1")
	first, err := c.Conn()
	if err != nil {
		t.Fatalf("first Conn: %v", err)
	}
	second, err := c.Conn()
	if err != nil || second != first {
		t.Fatalf("second Conn = %p, %v; want the first connection %p", second, err, first)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	unused := relayclient.New("127.0.0.1:1")
	if err := unused.Close(); err != nil {
		t.Fatalf("Close of a client never dialled: %v", err)
	}
	if cc, err := unused.Conn(); cc != nil || !errors.Is(err, relayclient.ErrClosed) {
		t.Fatalf("Conn after Close = %v, %v; want ErrClosed", cc, err)
	}
}

func TestRetryDelayGrowsAndIsBounded(t *testing.T) {
	prev := time.Duration(0)
	for attempt := -1; attempt < 10; attempt++ {
		d := relayclient.RetryDelay(attempt)
		if d < prev {
			t.Fatalf("RetryDelay(%d) = %s, below the previous %s", attempt, d, prev)
		}
		if d <= 0 || d > 2*time.Second {
			t.Fatalf("RetryDelay(%d) = %s, outside (0, 2s]", attempt, d)
		}
		prev = d
	}
}
