package workerserver

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// heapHolder is where some of the heap in use goes: the first function
// outside the runtime on the allocation's stack (what allocated it, as
// pprof -top shows it).
type heapHolder struct {
	fn    string
	bytes float64 // in use, scaled from the sampled allocations
}

// heapHolders reads the heap profile as of the last collection (call
// runtime.GC first) and returns its in-use bytes by holder, largest first,
// scaled from the sample rate as pprof does.
func heapHolders() []heapHolder {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	by := map[string]float64{}
	for _, r := range recs {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs == 0 || bytes == 0 {
			continue
		}
		scale := 1.0
		if rate > 1 {
			avg := float64(bytes) / float64(objs)
			scale = 1 / (1 - math.Exp(-avg/rate))
		}
		by[holderOf(r.Stack())] += float64(bytes) * scale
	}
	out := make([]heapHolder, 0, len(by))
	for fn, b := range by {
		out = append(out, heapHolder{fn: fn, bytes: b})
	}
	slices.SortFunc(out, func(a, b heapHolder) int { return cmp.Compare(b.bytes, a.bytes) })
	return out
}

// holderOf is the first function of stack outside the runtime and the
// standard library's allocation helpers.
func holderOf(stack []uintptr) string {
	frames := runtime.CallersFrames(stack)
	first := ""
	for {
		f, more := frames.Next()
		if first == "" {
			first = f.Function
		}
		if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "internal/") &&
			!strings.HasPrefix(f.Function, "slices.") && !strings.HasPrefix(f.Function, "strings.(*Builder)") {
			return f.Function
		}
		if !more {
			return first
		}
	}
}

// heapSummary renders the top holders per chat, with their share of the
// profile's total.
func heapSummary(holders []heapHolder, chats, top int) string {
	var total float64
	for _, h := range holders {
		total += h.bytes
	}
	var b strings.Builder
	fmt.Fprintf(&b, "heap profile while the chats are held: %.1f MiB in use, %.1f KiB a chat; top holders:\n",
		total/(1<<20), total/float64(chats)/1024)
	for i, h := range holders {
		if i == top {
			break
		}
		fmt.Fprintf(&b, "  %6.2f KiB/chat %5.1f%%  %s\n", h.bytes/float64(chats)/1024, 100*h.bytes/total, h.fn)
	}
	return b.String()
}

// scrapeGauge reads one unlabelled gauge from a Prometheus /metrics page,
// as an operator's scraper does.
func scrapeGauge(url, name string) (float64, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return gaugeIn(resp.Body, name)
}

func gaugeIn(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s on the page", name)
}
