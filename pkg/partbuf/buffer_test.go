package partbuf_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/partbuf"
)

type fixture struct {
	buf   *partbuf.Buffer
	clock *clockwork.FakeClock
	ep    partbuf.Episode
}

// setup returns a buffer on a fake clock, closed when the test ends, and a
// fresh episode. Call it inside the synctest bubble when the test uses one.
func setup(t *testing.T, opts partbuf.Options) fixture {
	t.Helper()
	clock := clockwork.NewFakeClock()
	opts.Clock = clock
	buf := partbuf.New(opts)
	t.Cleanup(buf.Close)
	return fixture{buf: buf, clock: clock, ep: newEpisode()}
}

func newEpisode() partbuf.Episode {
	return partbuf.Episode{ChatID: uuid.New(), HistoryVersion: 7, GenerationAttempt: 2}
}

func data(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"type":"text","text":"delta %d"}`, i))
}

func addParts(t *testing.T, buf *partbuf.Buffer, ep partbuf.Episode, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		seq, err := buf.AddPart(ep, "assistant", data(i))
		require.NoError(t, err)
		require.Equal(t, int64(i), seq)
	}
}

// requireParts checks that parts are seq 1..n carrying data(1)..data(n).
func requireParts(t *testing.T, n int, parts []partbuf.Part) {
	t.Helper()
	require.Len(t, parts, n)
	for i, p := range parts {
		require.Equal(t, int64(i+1), p.Seq)
		require.Equal(t, "assistant", p.Role)
		require.JSONEq(t, string(data(i+1)), string(p.Data))
	}
}

// recvAll reads ch until it is closed. In a bubble, a channel that never
// closes fails the test as a deadlock instead of hanging.
func recvAll(ch <-chan partbuf.Part) []partbuf.Part {
	var parts []partbuf.Part
	for p := range ch {
		parts = append(parts, p)
	}
	return parts
}

// requireClosed checks that ch is closed with nothing left to receive. Call
// it after synctest.Wait, when the subscription goroutine is settled.
func requireClosed(t *testing.T, ch <-chan partbuf.Part) {
	t.Helper()
	select {
	case p, ok := <-ch:
		require.False(t, ok, "channel open, received part %d", p.Seq)
	default:
		require.Fail(t, "channel neither closed nor ready")
	}
}

// requireBlocked checks that ch has nothing to receive and is not closed.
// Call it after synctest.Wait.
func requireBlocked(t *testing.T, ch <-chan partbuf.Part) {
	t.Helper()
	select {
	case p, ok := <-ch:
		require.Fail(t, "channel not blocked", "received part %d, open %v", p.Seq, ok)
	default:
	}
}

func TestCreateEpisode(t *testing.T) {
	t.Parallel()

	t.Run("TwiceFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		require.ErrorIs(t, b.buf.CreateEpisode(b.ep), partbuf.ErrEpisodeExists)
		b.buf.CloseEpisode(b.ep)
		require.ErrorIs(t, b.buf.CreateEpisode(b.ep), partbuf.ErrEpisodeExists)
	})

	t.Run("AfterCloseFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		b.buf.CloseEpisode(b.ep)
		require.ErrorIs(t, b.buf.CreateEpisode(b.ep), partbuf.ErrEpisodeExists)
	})

	t.Run("EpisodesAreDistinct", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		for _, other := range []partbuf.Episode{
			{ChatID: uuid.New(), HistoryVersion: b.ep.HistoryVersion, GenerationAttempt: b.ep.GenerationAttempt},
			{ChatID: b.ep.ChatID, HistoryVersion: b.ep.HistoryVersion + 1, GenerationAttempt: b.ep.GenerationAttempt},
			{ChatID: b.ep.ChatID, HistoryVersion: b.ep.HistoryVersion, GenerationAttempt: b.ep.GenerationAttempt + 1},
		} {
			require.NoError(t, b.buf.CreateEpisode(other))
			addParts(t, b.buf, other, 1, 1)
		}
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		require.Empty(t, parts)
	})
}

func TestCloseEpisode(t *testing.T) {
	t.Parallel()

	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		addParts(t, b.buf, b.ep, 1, 2)
		b.buf.CloseEpisode(b.ep)
		b.buf.CloseEpisode(b.ep)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		requireParts(t, 2, parts)
	})

	t.Run("MissingCreatesClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		b.buf.CloseEpisode(b.ep)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		require.Empty(t, parts)
		_, err = b.buf.AddPart(b.ep, "assistant", data(1))
		require.ErrorIs(t, err, partbuf.ErrEpisodeClosed)
		require.ErrorIs(t, b.buf.StartModelInvocation(b.ep), partbuf.ErrEpisodeClosed)
	})

	t.Run("StopsAddPart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		addParts(t, b.buf, b.ep, 1, 1)
		b.buf.CloseEpisode(b.ep)
		_, err := b.buf.AddPart(b.ep, "assistant", data(2))
		require.ErrorIs(t, err, partbuf.ErrEpisodeClosed)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		requireParts(t, 1, parts)
	})
}

func TestAddPart(t *testing.T) {
	t.Parallel()

	t.Run("MissingEpisode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		_, err := b.buf.AddPart(b.ep, "assistant", data(1))
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
	})

	t.Run("SeqContiguousFromOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		addParts(t, b.buf, b.ep, 1, 100)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		requireParts(t, 100, parts)

		// Each episode counts from 1.
		other := b.ep
		other.GenerationAttempt++
		require.NoError(t, b.buf.CreateEpisode(other))
		addParts(t, b.buf, other, 1, 3)
	})

	t.Run("InvalidJSONTakesNoSeq", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		addParts(t, b.buf, b.ep, 1, 1)
		_, err := b.buf.AddPart(b.ep, "assistant", json.RawMessage(`{"text":`))
		require.Error(t, err)
		addParts(t, b.buf, b.ep, 2, 2)
	})

	t.Run("CopiesData", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		raw := []byte(`"abc"`)
		_, err := b.buf.AddPart(b.ep, "assistant", raw)
		require.NoError(t, err)
		raw[1] = 'X'
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		require.Equal(t, `"abc"`, string(parts[0].Data))
	})
}

// partSize is the content size AddPart counts for a part that is not a
// delta: its data.
func partSize(_ *testing.T, _ int64, d json.RawMessage) int {
	return len(d)
}

func TestEpisodeCap(t *testing.T) {
	t.Parallel()

	t.Run("ExactFitThenFull", func(t *testing.T) {
		t.Parallel()
		// Room for exactly parts 1..10.
		limit := 0
		for i := 1; i <= 10; i++ {
			limit += partSize(t, int64(i), data(i))
		}
		b := setup(t, partbuf.Options{MaxEpisodeBytes: limit})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		addParts(t, b.buf, b.ep, 1, 10)
		_, err := b.buf.AddPart(b.ep, "assistant", json.RawMessage(`0`))
		require.ErrorIs(t, err, partbuf.ErrEpisodeFull)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		requireParts(t, 10, parts)
	})

	t.Run("FullIsSticky", func(t *testing.T) {
		t.Parallel()
		small := json.RawMessage(`1`)
		big := json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)
		b := setup(t, partbuf.Options{MaxEpisodeBytes: partSize(t, 1, small) + partSize(t, 2, small)})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		_, err := b.buf.AddPart(b.ep, "assistant", small)
		require.NoError(t, err)
		_, err = b.buf.AddPart(b.ep, "assistant", big)
		require.ErrorIs(t, err, partbuf.ErrEpisodeFull)
		// Part 2 would fit, but accepting it would hide that big was lost.
		_, err = b.buf.AddPart(b.ep, "assistant", small)
		require.ErrorIs(t, err, partbuf.ErrEpisodeFull)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		require.Len(t, parts, 1)
	})

	t.Run("DefaultFourMiBOfContent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		chunk := json.RawMessage(`"` + strings.Repeat("y", 1000) + `"`)
		total := 0
		for seq := int64(1); ; seq++ {
			got, err := b.buf.AddPart(b.ep, "assistant", chunk)
			if err != nil {
				require.ErrorIs(t, err, partbuf.ErrEpisodeFull)
				require.Greater(t, total+len(chunk), partbuf.DefaultMaxEpisodeBytes)
				break
			}
			require.Equal(t, seq, got)
			total += len(chunk)
		}
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		held := 0
		for _, p := range parts {
			held += len(p.Data)
		}
		require.Equal(t, total, held)
		require.LessOrEqual(t, held, 4<<20)
		require.Greater(t, held, 4<<20-1002)
	})
}

func TestGetParts(t *testing.T) {
	t.Parallel()

	t.Run("MissingEpisode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		_, err := b.buf.GetParts(b.ep)
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
	})

	t.Run("WaitingSubscriberIsNotAnEpisode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		_, cancel := b.buf.SubscribeToEpisode(b.ep)
		defer cancel()
		_, err := b.buf.GetParts(b.ep)
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
		_, err = b.buf.AddPart(b.ep, "assistant", data(1))
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
		_, err = b.buf.ToolCompletions(b.ep)
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
	})

	t.Run("ReturnsCopy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		addParts(t, b.buf, b.ep, 1, 2)
		parts, err := b.buf.GetParts(b.ep)
		require.NoError(t, err)
		parts[0] = partbuf.Part{Seq: 99}
		_ = append(parts[:1], partbuf.Part{Seq: 98})
		parts, err = b.buf.GetParts(b.ep)
		require.NoError(t, err)
		requireParts(t, 2, parts)
	})
}

func TestModelInvocation(t *testing.T) {
	t.Parallel()

	t.Run("StampsClock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		require.True(t, b.buf.ModelInvokedAt(b.ep).IsZero())
		b.clock.Advance(time.Minute)
		at := b.clock.Now()
		require.NoError(t, b.buf.StartModelInvocation(b.ep))
		require.Equal(t, at, b.buf.ModelInvokedAt(b.ep))

		// The first stamp stays.
		b.clock.Advance(time.Second)
		require.NoError(t, b.buf.StartModelInvocation(b.ep))
		require.Equal(t, at, b.buf.ModelInvokedAt(b.ep))

		// Closing keeps the stamp until collection.
		b.buf.CloseEpisode(b.ep)
		require.Equal(t, at, b.buf.ModelInvokedAt(b.ep))
	})

	t.Run("MissingEpisode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.ErrorIs(t, b.buf.StartModelInvocation(b.ep), partbuf.ErrEpisodeNotFound)
		require.True(t, b.buf.ModelInvokedAt(b.ep).IsZero())
	})

	t.Run("ClosedEpisode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		b.buf.CloseEpisode(b.ep)
		require.ErrorIs(t, b.buf.StartModelInvocation(b.ep), partbuf.ErrEpisodeClosed)
		require.True(t, b.buf.ModelInvokedAt(b.ep).IsZero())
	})
}

func TestToolTimings(t *testing.T) {
	t.Parallel()

	t.Run("Recorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		require.NoError(t, b.buf.CreateEpisode(b.ep))
		got, err := b.buf.ToolCompletions(b.ep)
		require.NoError(t, err)
		require.Empty(t, got)

		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		require.NoError(t, b.buf.RecordToolStart(b.ep, 2, t0.Add(2*time.Second)))
		require.NoError(t, b.buf.RecordToolStart(b.ep, 0, t0))
		require.NoError(t, b.buf.RecordToolStart(b.ep, 1, t0.Add(time.Second)))
		require.NoError(t, b.buf.RecordToolCompletion(b.ep, 0, t0.Add(5*time.Second)))
		require.NoError(t, b.buf.RecordToolCompletion(b.ep, 2, t0.Add(3*time.Second)))
		// A later record of the same occurrence replaces the earlier one.
		require.NoError(t, b.buf.RecordToolCompletion(b.ep, 2, t0.Add(4*time.Second)))

		got, err = b.buf.ToolCompletions(b.ep)
		require.NoError(t, err)
		require.Equal(t, []partbuf.ToolTiming{
			{CallIndex: 0, StartedAt: t0, CompletedAt: t0.Add(5 * time.Second)},
			{CallIndex: 1, StartedAt: t0.Add(time.Second)},
			{CallIndex: 2, StartedAt: t0.Add(2 * time.Second), CompletedAt: t0.Add(4 * time.Second)},
		}, got)

		// Readable after close, not writable.
		b.buf.CloseEpisode(b.ep)
		require.ErrorIs(t, b.buf.RecordToolCompletion(b.ep, 1, t0), partbuf.ErrEpisodeClosed)
		require.ErrorIs(t, b.buf.RecordToolStart(b.ep, 3, t0), partbuf.ErrEpisodeClosed)
		again, err := b.buf.ToolCompletions(b.ep)
		require.NoError(t, err)
		require.Equal(t, got, again)
	})

	t.Run("MissingEpisode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, partbuf.Options{})
		now := time.Now()
		require.ErrorIs(t, b.buf.RecordToolStart(b.ep, 0, now), partbuf.ErrEpisodeNotFound)
		require.ErrorIs(t, b.buf.RecordToolCompletion(b.ep, 0, now), partbuf.ErrEpisodeNotFound)
		_, err := b.buf.ToolCompletions(b.ep)
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
	})
}

func TestSubscribeToEpisode(t *testing.T) {
	t.Parallel()

	t.Run("BeforeCreate", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			synctest.Wait()
			requireBlocked(t, ch)

			require.NoError(t, b.buf.CreateEpisode(b.ep))
			synctest.Wait()
			requireBlocked(t, ch)

			addParts(t, b.buf, b.ep, 1, 5)
			b.buf.CloseEpisode(b.ep)
			requireParts(t, 5, recvAll(ch))
		})
	})

	t.Run("BeforeCloseOfMissingEpisode", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			b.buf.CloseEpisode(b.ep)
			require.Empty(t, recvAll(ch))
		})
	})

	t.Run("AfterClose", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 4)
			b.buf.CloseEpisode(b.ep)
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			requireParts(t, 4, recvAll(ch))
		})
	})

	t.Run("AfterCloseEmpty", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			b.buf.CloseEpisode(b.ep)
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			require.Empty(t, recvAll(ch))
		})
	})

	t.Run("BufferedThenLive", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 3)
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()

			var got []partbuf.Part
			for range 3 {
				got = append(got, <-ch)
			}
			synctest.Wait()
			requireBlocked(t, ch)

			for i := 4; i <= 6; i++ {
				addParts(t, b.buf, b.ep, i, i)
				got = append(got, <-ch)
			}
			b.buf.CloseEpisode(b.ep)
			got = append(got, recvAll(ch)...)
			requireParts(t, 6, got)
		})
	})

	t.Run("ManySubscribers", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			results := make([][]partbuf.Part, 8)
			var wg sync.WaitGroup
			for i := range results {
				ch, cancel := b.buf.SubscribeToEpisode(b.ep)
				defer cancel()
				if i == 4 {
					require.NoError(t, b.buf.CreateEpisode(b.ep))
					addParts(t, b.buf, b.ep, 1, 10)
				}
				wg.Go(func() { results[i] = recvAll(ch) })
			}
			addParts(t, b.buf, b.ep, 11, 20)
			b.buf.CloseEpisode(b.ep)
			wg.Wait()
			for _, got := range results {
				requireParts(t, 20, got)
			}
		})
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 3)
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			require.Equal(t, int64(1), (<-ch).Seq)
			cancel()
			// Parts not taken before cancel are dropped.
			requireClosed(t, ch)
			cancel()

			// Other subscriptions are unaffected.
			other, cancelOther := b.buf.SubscribeToEpisode(b.ep)
			defer cancelOther()
			b.buf.CloseEpisode(b.ep)
			requireParts(t, 3, recvAll(other))
		})
	})

	t.Run("CancelWhileWaitingForCreate", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			synctest.Wait()
			cancel()
			requireClosed(t, ch)
			// The waiting left nothing behind.
			_, err := b.buf.GetParts(b.ep)
			require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
			require.NoError(t, b.buf.CreateEpisode(b.ep))
		})
	})

	t.Run("BufferClose", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			buf := partbuf.New(partbuf.Options{Clock: clock})
			ep := newEpisode()
			waiting, cancelWaiting := buf.SubscribeToEpisode(ep)
			other := newEpisode()
			require.NoError(t, buf.CreateEpisode(other))
			addParts(t, buf, other, 1, 2)
			blocked, cancelBlocked := buf.SubscribeToEpisode(other)
			synctest.Wait()

			buf.Close()
			requireClosed(t, waiting)
			requireClosed(t, blocked)
			cancelWaiting()
			cancelBlocked()
			buf.Close()

			after, cancelAfter := buf.SubscribeToEpisode(other)
			requireClosed(t, after)
			cancelAfter()
			// Stored episodes stay readable.
			parts, err := buf.GetParts(other)
			require.NoError(t, err)
			requireParts(t, 2, parts)
		})
	})
}

func TestSlowSubscriber(t *testing.T) {
	t.Parallel()

	t.Run("DroppedWhileFastKeepsReceiving", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			slow, cancelSlow := b.buf.SubscribeToEpisode(b.ep)
			defer cancelSlow()
			fast, cancelFast := b.buf.SubscribeToEpisode(b.ep)
			defer cancelFast()

			addParts(t, b.buf, b.ep, 1, 1)
			require.Equal(t, int64(1), (<-fast).Seq)
			synctest.Wait()

			b.clock.Advance(partbuf.DefaultSubscriberTimeout - time.Nanosecond)
			synctest.Wait()
			addParts(t, b.buf, b.ep, 2, 2)
			require.Equal(t, int64(2), (<-fast).Seq)

			// The slow one has not taken part 1 for 10 s.
			b.clock.Advance(time.Nanosecond)
			synctest.Wait()
			requireClosed(t, slow)

			addParts(t, b.buf, b.ep, 3, 3)
			require.Equal(t, int64(3), (<-fast).Seq)
			b.buf.CloseEpisode(b.ep)
			require.Empty(t, recvAll(fast))
		})
	})

	t.Run("TimeoutIsPerPart", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{SubscriberTimeout: 3 * time.Second})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			addParts(t, b.buf, b.ep, 1, 3)

			// Each part is taken just before its own timeout: 6 s in all.
			var got []partbuf.Part
			for range 3 {
				synctest.Wait()
				b.clock.Advance(3*time.Second - time.Nanosecond)
				synctest.Wait()
				got = append(got, <-ch)
			}
			b.buf.CloseEpisode(b.ep)
			got = append(got, recvAll(ch)...)
			requireParts(t, 3, got)
		})
	})

	t.Run("IdleSubscriberIsNotSlow", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			synctest.Wait()
			// No part offered: waiting for parts has no deadline.
			b.clock.Advance(time.Hour)
			synctest.Wait()
			requireBlocked(t, ch)
			addParts(t, b.buf, b.ep, 1, 1)
			b.buf.CloseEpisode(b.ep)
			requireParts(t, 1, recvAll(ch))
		})
	})
}

// TestConcurrent runs adders, subscribers and readers on shared episodes on
// the real clock; run it with -race.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	buf := partbuf.New(partbuf.Options{MaxEpisodeBytes: 64 << 20})
	defer buf.Close()

	const (
		episodes    = 4
		adders      = 4
		perAdder    = 500
		subscribers = 4
	)
	eps := make([]partbuf.Episode, episodes)
	for i := range eps {
		eps[i] = newEpisode()
	}

	var subs sync.WaitGroup
	type result struct {
		ep    partbuf.Episode
		parts []partbuf.Part
	}
	results := make(chan result, episodes*(subscribers+1))
	for _, ep := range eps {
		for range subscribers {
			ch, cancel := buf.SubscribeToEpisode(ep)
			subs.Go(func() {
				defer cancel()
				results <- result{ep: ep, parts: recvAll(ch)}
			})
		}
	}

	var work sync.WaitGroup
	for _, ep := range eps {
		work.Go(func() {
			require.NoError(t, buf.CreateEpisode(ep))
			var adding sync.WaitGroup
			for a := range adders {
				adding.Go(func() {
					for i := range perAdder {
						_, err := buf.AddPart(ep, "assistant", data(a*perAdder+i))
						if err != nil {
							t.Errorf("AddPart: %v", err)
							return
						}
						if i%50 == 0 {
							_, _ = buf.GetParts(ep)
							_ = buf.RecordToolStart(ep, a, time.Now())
							_, _ = buf.ToolCompletions(ep)
						}
					}
				})
			}
			adding.Wait()
			buf.CloseEpisode(ep)
		})
		// Late subscribers join while parts flow.
		ch, cancel := buf.SubscribeToEpisode(ep)
		subs.Go(func() {
			defer cancel()
			results <- result{ep: ep, parts: recvAll(ch)}
		})
	}
	work.Wait()
	subs.Wait()
	close(results)

	const total = adders * perAdder
	n := 0
	for r := range results {
		n++
		want, err := buf.GetParts(r.ep)
		require.NoError(t, err)
		require.Len(t, want, total)
		require.Equal(t, want, r.parts)
		seen := make(map[string]bool, total)
		for i, p := range r.parts {
			require.Equal(t, int64(i+1), p.Seq)
			seen[string(p.Data)] = true
		}
		require.Len(t, seen, total)
	}
	require.Equal(t, episodes*(subscribers+1), n)
}

// TestNoGoroutineLeak checks, without synctest, that every ending of a
// subscription and Close release their goroutines.
func TestNoGoroutineLeak(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	before := runtime.NumGoroutine()

	buf := partbuf.New(partbuf.Options{SubscriberTimeout: 10 * time.Millisecond})
	ep := newEpisode()
	require.NoError(t, buf.CreateEpisode(ep))
	addParts(t, buf, ep, 1, 3)

	var cancels []func()
	// Waits for a missing episode, then canceled.
	_, c := buf.SubscribeToEpisode(newEpisode())
	cancels = append(cancels, c)
	// Never reads: dropped by the timeout.
	slow, c := buf.SubscribeToEpisode(ep)
	cancels = append(cancels, c)
	// Reads to the end of the closed episode.
	done, c := buf.SubscribeToEpisode(ep)
	cancels = append(cancels, c)
	// Idle on an open episode until Close.
	open := newEpisode()
	require.NoError(t, buf.CreateEpisode(open))
	idle, _ := buf.SubscribeToEpisode(open)

	buf.CloseEpisode(ep)
	requireParts(t, 3, recvAll(done))
	cancels[0]()
	buf.Close()
	require.Empty(t, recvAll(idle))
	for _, c := range cancels {
		c()
	}

	// Polled by hand: require.Eventually runs its condition on a goroutine
	// of its own, which the count would see.
	now := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); now > before && time.Now().Before(deadline); now = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, now, before, "goroutines left running")
	// The slow subscription timed out without ever being read.
	_, ok := <-slow
	require.False(t, ok)
}

// advance moves the fake clock by d in steps of one second, letting the
// buffer's goroutines settle after each, so every GC tick is handled at
// its own time.
func advance(clock *clockwork.FakeClock, d time.Duration) {
	for ; d > 0; d -= time.Second {
		clock.Advance(min(d, time.Second))
		synctest.Wait()
	}
}

func requireCollected(t *testing.T, buf *partbuf.Buffer, ep partbuf.Episode, collected bool) {
	t.Helper()
	_, err := buf.GetParts(ep)
	if collected {
		require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
	} else {
		require.NoError(t, err)
	}
}

func TestGarbageCollection(t *testing.T) {
	t.Parallel()
	opts := partbuf.Options{GCInterval: time.Second}

	t.Run("AfterDelay", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, opts)
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 2)
			require.NoError(t, b.buf.StartModelInvocation(b.ep))
			b.buf.CloseEpisode(b.ep)

			advance(b.clock, partbuf.DefaultGCDelay-time.Second)
			requireCollected(t, b.buf, b.ep, false)
			require.False(t, b.buf.ModelInvokedAt(b.ep).IsZero())
			advance(b.clock, time.Second)
			requireCollected(t, b.buf, b.ep, true)
			require.True(t, b.buf.ModelInvokedAt(b.ep).IsZero())
			// A collected episode can be made again.
			require.NoError(t, b.buf.CreateEpisode(b.ep))
		})
	})

	t.Run("OpenEpisodesStay", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, opts)
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			advance(b.clock, time.Minute)
			requireCollected(t, b.buf, b.ep, false)
		})
	})

	t.Run("SecondCloseKeepsFirstTime", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, opts)
			b.buf.CloseEpisode(b.ep)
			advance(b.clock, 10*time.Second)
			b.buf.CloseEpisode(b.ep)
			advance(b.clock, 5*time.Second)
			requireCollected(t, b.buf, b.ep, true)
		})
	})

	t.Run("NotWithSubscribers", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, partbuf.Options{GCInterval: time.Second, SubscriberTimeout: time.Hour})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 3)
			reader, cancelReader := b.buf.SubscribeToEpisode(b.ep)
			defer cancelReader()
			_, cancelWaiting := b.buf.SubscribeToEpisode(b.ep) // never reads
			defer cancelWaiting()
			require.Equal(t, int64(1), (<-reader).Seq)
			b.buf.CloseEpisode(b.ep)

			advance(b.clock, time.Minute)
			requireCollected(t, b.buf, b.ep, false)

			got := append([]partbuf.Part{{Seq: 1, Role: "assistant", Data: data(1)}}, recvAll(reader)...)
			requireParts(t, 3, got)
			advance(b.clock, time.Second)
			requireCollected(t, b.buf, b.ep, false)

			cancelWaiting()
			advance(b.clock, time.Second)
			requireCollected(t, b.buf, b.ep, true)
		})
	})

	t.Run("DroppedSubscriberReleases", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, opts)
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 1)
			slow, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			b.buf.CloseEpisode(b.ep)
			// Dropped at 10 s, collectable from 15 s.
			advance(b.clock, partbuf.DefaultGCDelay-time.Second)
			requireClosed(t, slow)
			requireCollected(t, b.buf, b.ep, false)
			advance(b.clock, time.Second)
			requireCollected(t, b.buf, b.ep, true)
		})
	})

	t.Run("SubscribeAfterCollectionWaits", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, opts)
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 1)
			b.buf.CloseEpisode(b.ep)
			advance(b.clock, partbuf.DefaultGCDelay)
			requireCollected(t, b.buf, b.ep, true)

			ch, cancel := b.buf.SubscribeToEpisode(b.ep)
			defer cancel()
			synctest.Wait()
			requireBlocked(t, ch)
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			addParts(t, b.buf, b.ep, 1, 1)
			b.buf.CloseEpisode(b.ep)
			requireParts(t, 1, recvAll(ch))
		})
	})
}
