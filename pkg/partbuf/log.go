package partbuf

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
)

// A delta is a part whose data is exactly {"index": n, "type": "text"} or
// {"index": n, "type": "reasoning"} with a "text": the shape the runner
// gives each token of a text or reasoning part. Clients append the text of
// consecutive deltas of one index and type (the web client's mergePart), so
// a Log stores such a run as one part: the texts concatenated, plus where
// each delta ends, so any cursor inside the run can be resumed exactly.
type delta struct {
	Index int    `json:"index"`
	Type  string `json:"type"`
	Text  string `json:"text,omitempty"`
}

// parseDelta reports whether data is a delta, and which. A part with any
// other field, or written in any other way, is not: its data is kept as is.
func parseDelta(data []byte) (delta, bool) {
	if len(data) < 10 || string(data[:9]) != `{"index":` {
		return delta{}, false
	}
	var d delta
	if err := json.Unmarshal(data, &d); err != nil || (d.Type != "text" && d.Type != "reasoning") {
		return delta{}, false
	}
	// Only data that renders back byte for byte is a delta, so coalescing
	// never drops a field the buffer does not know.
	if enc, err := json.Marshal(d); err != nil || string(enc) != string(data) {
		return delta{}, false
	}
	return d, true
}

// ErrLogGap is returned by Log.Append for a part that does not follow the
// log's last seq.
var ErrLogGap = errors.New("partbuf: part does not follow the log's last seq")

// Log is an episode's parts as a hop stores them: append only, in seq
// order, with consecutive deltas of one role, index and type coalesced into
// one entry. It counts content bytes: a delta's text (at least one byte
// each, so empty deltas are bounded too) and any other part's data. A Log
// is not safe for concurrent use; its owner guards it, and readers take a
// View under that guard and render it outside.
type Log struct {
	entries []logEntry
	bytes   int
	last    int64
}

// logEntry is one stored part or run of deltas.
type logEntry struct {
	first, last int64
	role        string
	data        json.RawMessage // not a delta
	isDelta     bool
	d           delta     // a run: index and type (Text unused)
	text        []byte    // the run's texts concatenated; only appended
	ends        deltaEnds // where each delta of the run ends in text; only appended
}

// clip returns e with its run's arrays clipped (deltaEnds.clip), so that
// deltas joining e afterwards cannot change what the copy reads.
func (e logEntry) clip() logEntry {
	e.text = e.text[:len(e.text):len(e.text)]
	e.ends = e.ends.clip()
	return e
}

// LastSeq is the seq of the log's last part, 0 when it is empty.
func (l *Log) LastSeq() int64 { return l.last }

// Bytes is the content the log holds, in bytes.
func (l *Log) Bytes() int { return l.bytes }

// Entries is the number of stored entries (a run counts once).
func (l *Log) Entries() int { return len(l.entries) }

// Size returns the content bytes p would add to a log.
func Size(p Part) int {
	if d, ok := deltaOf(p); ok {
		return max(len(d.Text), deltaCount(p))
	}
	return len(p.Data)
}

func deltaCount(p Part) int {
	if len(p.DeltaEnds) > 0 {
		return len(p.DeltaEnds)
	}
	return 1
}

func deltaOf(p Part) (delta, bool) { return parseDelta(p.Data) }

// Append stores p, which must follow the last part: p.FirstSeq (or p.Seq
// when FirstSeq is 0) is LastSeq()+1. It returns the content bytes added.
func (l *Log) Append(p Part) (int, error) {
	d, isDelta := deltaOf(p)
	return l.append(p, d, isDelta)
}

// validEnds reports whether ends can say where each of a run's deltas ends
// in its text of n bytes: in order, the last at n.
func validEnds(ends []uint32, n int) bool {
	var prev uint32
	for _, e := range ends {
		if e < prev {
			return false
		}
		prev = e
	}
	return int(prev) == n
}

// AppendCapped is Append unless p would take the log's content over
// maxBytes, in which case it stores nothing and reports false.
func (l *Log) AppendCapped(p Part, maxBytes int) (bool, error) {
	d, isDelta := deltaOf(p)
	size := len(p.Data)
	if isDelta {
		size = max(len(d.Text), deltaCount(p))
	}
	if l.bytes+size > maxBytes {
		return false, nil
	}
	_, err := l.append(p, d, isDelta)
	return err == nil, err
}

func (l *Log) append(p Part, d delta, isDelta bool) (int, error) {
	first := p.First()
	if first != l.last+1 || p.Seq < first {
		return 0, ErrLogGap
	}
	if isDelta {
		n := int(p.Seq - first + 1)
		if len(p.DeltaEnds) != 0 && (len(p.DeltaEnds) != n || !validEnds(p.DeltaEnds, len(d.Text))) || len(p.DeltaEnds) == 0 && n != 1 {
			isDelta = false // boundaries unknown: keep it whole
		}
	}
	if !isDelta {
		l.entries = append(l.entries, logEntry{first: first, last: p.Seq, role: p.Role, data: slices.Clip(p.Data)})
		l.last = p.Seq
		l.bytes += len(p.Data)
		return len(p.Data), nil
	}
	var e *logEntry
	if k := len(l.entries); k > 0 {
		prev := &l.entries[k-1]
		if prev.isDelta && prev.role == p.Role && prev.d.Index == d.Index && prev.d.Type == d.Type {
			e = prev
		}
	}
	if e == nil {
		l.entries = append(l.entries, logEntry{first: first, role: p.Role, isDelta: true, d: delta{Index: d.Index, Type: d.Type}})
		e = &l.entries[len(l.entries)-1]
	}
	base := uint32(len(e.text))
	e.text = append(e.text, d.Text...)
	if len(p.DeltaEnds) == 0 {
		e.ends.add(base, uint32(len(d.Text)))
	} else {
		start := base
		for _, end := range p.DeltaEnds {
			e.ends.add(start, base+end-start)
			start = base + end
		}
	}
	e.last = p.Seq
	l.last = p.Seq
	size := max(len(d.Text), int(p.Seq-first+1))
	l.bytes += size
	return size, nil
}

// View is the parts of a Log after a seq, taken under the log's guard and
// rendered outside it: it shares the log's bytes, which are only appended.
type View struct {
	after   int64
	entries []logEntry
}

// After returns a View of the parts after seq after (all of them for 0).
func (l *Log) After(after int64) View {
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].last > after })
	if i == len(l.entries) {
		return View{after: after}
	}
	// Copy the entries: the last one's fields change as deltas join it.
	es := make([]logEntry, len(l.entries)-i)
	for j := range es {
		es[j] = l.entries[i+j].clip()
	}
	return View{after: after, entries: es}
}

// Snapshot is a Log as it was, readable without its guard while the log
// goes on: it shares every entry but the last, which only the last can
// change, and copies that one.
type Snapshot struct {
	entries []logEntry // all but the last
	last    *logEntry
}

// Snapshot returns the log as it is now, in constant time.
func (l *Log) Snapshot() Snapshot {
	k := len(l.entries)
	if k == 0 {
		return Snapshot{}
	}
	e := l.entries[k-1].clip()
	return Snapshot{entries: l.entries[: k-1 : k-1], last: &e}
}

// LastSeq is the seq of the snapshot's last part, 0 when it is empty.
func (s Snapshot) LastSeq() int64 {
	if s.last == nil {
		return 0
	}
	return s.last.last
}

// After returns a View of the snapshot's parts after seq after.
func (s Snapshot) After(after int64) View {
	if s.last == nil || s.last.last <= after {
		return View{after: after}
	}
	i := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].last > after })
	es := make([]logEntry, 0, len(s.entries)-i+1)
	es = append(es, s.entries[i:]...)
	es = append(es, *s.last)
	return View{after: after, entries: es}
}

// Empty reports whether the view holds no part.
func (v View) Empty() bool { return len(v.entries) == 0 }

// LastSeq is the seq of the view's last part, or its cursor when empty.
func (v View) LastSeq() int64 {
	if len(v.entries) == 0 {
		return v.after
	}
	return v.entries[len(v.entries)-1].last
}

// Parts renders the view: one part per entry, the first cut after the
// view's cursor when it falls inside a run. A run of several deltas carries
// FirstSeq and DeltaEnds.
func (v View) Parts() []Part {
	out := make([]Part, 0, len(v.entries))
	for i, e := range v.entries {
		from := e.first
		if i == 0 && v.after >= e.first {
			from = v.after + 1
		}
		out = append(out, e.render(from))
	}
	return out
}

// render returns the entry from seq from on as one part.
func (e *logEntry) render(from int64) Part {
	if !e.isDelta {
		return Part{Seq: e.last, FirstSeq: e.first, Role: e.role, Data: e.data}
	}
	k := int(from - e.first) // index of the first delta rendered
	start := e.ends.start(k)
	d := delta{Index: e.d.Index, Type: e.d.Type, Text: string(e.text[start:])}
	data, _ := json.Marshal(d)
	p := Part{Seq: e.last, FirstSeq: from, Role: e.role, Data: data}
	if e.ends.len()-k > 1 {
		p.DeltaEnds = e.ends.endsFrom(k, start)
	}
	return p
}

// Trim returns the part of p after seq after: p itself when it starts past
// it, its tail when after falls inside a coalesced run, and false when
// nothing of p is left or p cannot be cut there (a part of several seqs
// that is not a run of deltas).
func (p Part) Trim(after int64) (Part, bool) {
	first := p.First()
	switch {
	case p.Seq <= after:
		return Part{}, false
	case first > after:
		return p, true
	}
	d, ok := parseDelta(p.Data)
	if !ok || len(p.DeltaEnds) != int(p.Seq-first+1) || !validEnds(p.DeltaEnds, len(d.Text)) {
		return Part{}, false
	}
	e := logEntry{first: first, last: p.Seq, role: p.Role, isDelta: true, d: d, text: []byte(d.Text), ends: endsOf(p.DeltaEnds)}
	return e.render(after + 1), true
}

// First is the seq of the first delta p carries.
func (p Part) First() int64 {
	if p.FirstSeq == 0 {
		return p.Seq
	}
	return p.FirstSeq
}

// deltaText joins the text of the snapshot's deltas of role, part index and
// type typ.
func (s Snapshot) deltaText(role string, index int, typ string) string {
	if s.last == nil {
		return ""
	}
	match := func(e *logEntry) bool {
		return e.isDelta && e.role == role && e.d.Index == index && e.d.Type == typ
	}
	n := 0
	for i := range s.entries {
		if match(&s.entries[i]) {
			n += len(s.entries[i].text)
		}
	}
	if match(s.last) {
		n += len(s.last.text)
	}
	var sb strings.Builder
	sb.Grow(n)
	for i := range s.entries {
		if match(&s.entries[i]) {
			sb.Write(s.entries[i].text)
		}
	}
	if match(s.last) {
		sb.Write(s.last.text)
	}
	return sb.String()
}
