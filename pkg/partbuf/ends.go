package partbuf

import "encoding/binary"

// endsBlock is how many deltas share one mark in deltaEnds.
const endsBlock = 64

// deltaEnds says where each delta of a run ends in the run's text, in about
// a byte a delta rather than the four of a []uint32 (with one delta per
// token, as many bytes as the text itself): each delta's length as a
// uvarint in lens, and a mark at every endsBlock-th delta giving where it
// starts in the text and in lens, so any end is found by reading at most
// endsBlock lengths. It is only appended, so a clipped copy (clip) shares
// its arrays with the original while the original goes on.
type deltaEnds struct {
	lens  []byte
	marks []endMark
	n     int
}

// endMark is where delta i*endsBlock of a run starts: in the run's text
// and in deltaEnds.lens.
type endMark struct{ text, pos uint32 }

// len is the number of deltas.
func (d *deltaEnds) len() int { return d.n }

// add records a delta of length bytes that starts at start in the text
// (the end of the delta before it).
func (d *deltaEnds) add(start, length uint32) {
	if d.n%endsBlock == 0 {
		d.marks = append(d.marks, endMark{text: start, pos: uint32(len(d.lens))})
	}
	d.lens = binary.AppendUvarint(d.lens, uint64(length))
	d.n++
}

// clip returns d with its arrays' capacities cut to their lengths, so that
// appending to d afterwards cannot write into what the copy reads.
func (d deltaEnds) clip() deltaEnds {
	d.lens = d.lens[:len(d.lens):len(d.lens)]
	d.marks = d.marks[:len(d.marks):len(d.marks)]
	return d
}

// start is where delta k (0 ≤ k ≤ len) starts in the text; start(len) is
// where the last one ends.
func (d *deltaEnds) start(k int) uint32 {
	if k == 0 {
		return 0
	}
	it := d.from(k - 1)
	return it.end()
}

// endsFrom returns the ends of deltas k..len-1, each less base.
func (d *deltaEnds) endsFrom(k int, base uint32) []uint32 {
	out := make([]uint32, 0, d.n-k)
	for it := d.from(k); it.k < d.n; it.next() {
		out = append(out, it.end()-base)
	}
	return out
}

// endsIter walks the deltas of a deltaEnds from one of them on.
type endsIter struct {
	d          *deltaEnds
	k          int    // the delta it is at
	begin, len uint32 // where delta k starts in the text, and its length
	pos        int    // where delta k+1's length starts in lens
}

// from returns an iterator at delta k < len.
func (d *deltaEnds) from(k int) endsIter {
	b := k / endsBlock
	m := d.marks[b]
	it := endsIter{d: d, k: b * endsBlock, begin: m.text, pos: int(m.pos)}
	it.read()
	for it.k < k {
		it.next()
	}
	return it
}

// read decodes the length of delta it.k.
func (it *endsIter) read() {
	l, w := binary.Uvarint(it.d.lens[it.pos:])
	it.len, it.pos = uint32(l), it.pos+w
}

func (it *endsIter) end() uint32 { return it.begin + it.len }

// next moves to the following delta (past the last one: k == len).
func (it *endsIter) next() {
	it.begin += it.len
	it.k++
	if it.k < it.d.n {
		it.read()
	}
}

// endsOf makes the deltaEnds of a run whose deltas end at ends.
func endsOf(ends []uint32) deltaEnds {
	var d deltaEnds
	var start uint32
	for _, e := range ends {
		d.add(start, e-start)
		start = e
	}
	return d
}
