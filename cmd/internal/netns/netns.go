// Package netns gives a test a host of its own to cut off: a Linux
// network namespace joined to the test's host by veth links, one per path
// the test wants to drop on its own (to Postgres, to NATS, to the rest),
// each on a /30 of private addresses no other interface uses. Traffic
// stays between the host and the namespace. It needs root and iproute2's
// ip; without either the test is skipped, saying so.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Namespace is a network namespace with its loopback up, deleted (with
// its links) when the test ends.
type Namespace struct {
	Name string
	ip   string
	id   string // the random part of every name, device names included
	next int    // the index of the next link
}

// Link is a veth pair between the host and the namespace. The host side
// holds Host, the namespace side NS, both in Prefix.
type Link struct {
	Host, NS netip.Addr
	// Prefix is Host with the link's /30: what pgcluster.Options.Networks
	// takes to listen on Host and trust NS.
	Prefix  netip.Prefix
	hostDev string
	ip      string
}

// New creates a namespace for the test. Not being root, or having no ip,
// skips the test with a message that says so; any other failure fails it.
func New(t testing.TB) *Namespace {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: run the partition tests as root (CI does)")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("network namespaces need iproute2's ip (apt-get install iproute2)")
	}
	id := randomHex(t, 3)
	n := &Namespace{Name: "chatd-" + id, ip: ip, id: id}
	run(t, ip, "netns", "add", n.Name)
	t.Cleanup(func() { _ = exec.Command(ip, "netns", "delete", n.Name).Run() })
	run(t, ip, "-n", n.Name, "link", "set", "lo", "up")
	return n
}

// Command is what runs a program inside the namespace: the program and
// its arguments follow it.
func (n *Namespace) Command() []string {
	return []string{n.ip, "netns", "exec", n.Name}
}

// Link adds a veth pair on a fresh /30 between the host and the namespace,
// both sides up.
func (n *Namespace) Link(t testing.TB) *Link {
	t.Helper()
	prefix := freeSubnet(t)
	host := prefix.Addr().Next()
	l := &Link{Host: host, NS: host.Next(), Prefix: netip.PrefixFrom(host, prefix.Bits()), ip: n.ip}
	l.hostDev = fmt.Sprintf("cd%sh%d", n.id, n.next)
	nsDev := fmt.Sprintf("cd%sn%d", n.id, n.next)
	n.next++
	run(t, n.ip, "link", "add", l.hostDev, "type", "veth", "peer", "name", nsDev)
	// Deleting the namespace deletes its side and so the pair; this also
	// covers a failure before the move.
	t.Cleanup(func() { _ = exec.Command(n.ip, "link", "delete", l.hostDev).Run() })
	run(t, n.ip, "link", "set", nsDev, "netns", n.Name)
	run(t, n.ip, "addr", "add", l.Prefix.String(), "dev", l.hostDev)
	run(t, n.ip, "link", "set", l.hostDev, "up")
	run(t, n.ip, "-n", n.Name, "addr", "add", netip.PrefixFrom(l.NS, prefix.Bits()).String(), "dev", nsDev)
	run(t, n.ip, "-n", n.Name, "link", "set", nsDev, "up")
	return l
}

// Cut drops the link as a pulled cable would, seen from the namespace:
// the host side goes down, so whatever the namespace sends over it is
// lost without an answer (its connections hang, new ones time out),
// while the host still reaches its own address on the link.
func (l *Link) Cut(t testing.TB) {
	t.Helper()
	run(t, l.ip, "link", "set", l.hostDev, "down")
}

// Restore brings the link back up; connections the namespace kept open
// carry on.
func (l *Link) Restore(t testing.TB) {
	t.Helper()
	run(t, l.ip, "link", "set", l.hostDev, "up")
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

var (
	subnetsMu sync.Mutex
	taken     = map[netip.Prefix]bool{} // handed out by this process
)

// freeSubnet picks a random /30 of 10.231.0.0/16 that neither this process
// nor any interface of the host uses.
func freeSubnet(t testing.TB) netip.Prefix {
	t.Helper()
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		t.Fatalf("ip addr show: %v", err)
	}
	var inUse []netip.Prefix
	for _, f := range strings.Fields(string(out)) {
		if p, err := netip.ParsePrefix(f); err == nil {
			inUse = append(inUse, p)
		}
	}
	subnetsMu.Lock()
	defer subnetsMu.Unlock()
	for range 100 {
		k, err := rand.Int(rand.Reader, big.NewInt(1<<14))
		if err != nil {
			t.Fatalf("random subnet: %v", err)
		}
		v := k.Int64() << 2
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(v >> 8), byte(v)}), 30)
		free := !taken[p]
		for _, u := range inUse {
			free = free && !u.Overlaps(p)
		}
		if free {
			taken[p] = true
			return p
		}
	}
	t.Fatal("no free /30 in 10.231.0.0/16 after 100 tries")
	return netip.Prefix{}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random name: %v", err)
	}
	return hex.EncodeToString(b)
}
