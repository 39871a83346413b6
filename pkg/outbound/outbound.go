// Package outbound is the policy for the URLs chatd itself dials on a
// tenant's behalf: model providers' base URLs and MCP servers. A URL is
// checked when it is stored and the address again when it is dialled (a
// name can resolve to something else by then: DNS rebinding).
//
// Allowed: http and https without userinfo, to public addresses and, by
// default, to loopback and private ones (a local model server is a real
// deployment). Refused always: link-local addresses (169.254.0.0/16, which
// holds the cloud metadata endpoint 169.254.169.254, and fe80::/10), the
// IPv6 metadata address fd00:ec2::254, unspecified and multicast
// addresses, and hosts written as a non-canonical number
// (http://2852039166/, 0251.0376.0251.0376, 0xa9fea9fe), which resolvers
// read as IPv4 addresses. CHATD_OUTBOUND_DENY_PRIVATE=true refuses
// loopback, private (RFC 1918, fc00::/7) and shared (100.64.0.0/10)
// addresses too.
package outbound

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// DenyPrivateEnv is the setting that turns DenyPrivate on.
const DenyPrivateEnv = "CHATD_OUTBOUND_DENY_PRIVATE"

// ErrRefused is wrapped by every refusal.
var ErrRefused = errors.New("outbound address refused")

// Policy decides which URLs and addresses chatd may dial.
type Policy struct {
	// DenyPrivate refuses loopback, private and shared addresses too.
	DenyPrivate bool
	// process, set only by Default, reads DenyPrivate from the process's
	// setting at each check instead (so a policy taken before the settings
	// were parsed, by a package variable, still follows them).
	process bool
}

// processDenyPrivate is the process's CHATD_OUTBOUND_DENY_PRIVATE, set by
// SetDenyPrivate (pkg/service does, from the parsed settings).
var processDenyPrivate atomic.Bool

// SetDenyPrivate sets the process's policy: pkg/service calls it with the
// parsed CHATD_OUTBOUND_DENY_PRIVATE before a service runs.
func SetDenyPrivate(deny bool) { processDenyPrivate.Store(deny) }

// Default is the process's policy: DenyPrivate as SetDenyPrivate last set
// it (false until then).
func Default() Policy { return Policy{process: true} }

// denyPrivate is the DenyPrivate p applies.
func (p Policy) denyPrivate() bool {
	if p.process {
		return processDenyPrivate.Load()
	}
	return p.DenyPrivate
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// CheckURL refuses raw unless it is an absolute http or https URL without
// userinfo whose host, when it is an address, is allowed. A host name is
// not resolved here (it may not resolve from the API's network); the dial
// checks what it resolves to.
func (p Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return refused("%q is not an absolute http or https URL", raw)
	}
	if u.User != nil {
		return refused("the URL must not carry credentials (user:password@)")
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(addr)
	}
	if numericHost(host) {
		return refused("host %q is an IP address in a non-canonical form; write it as a dotted quad", host)
	}
	return nil
}

// numericHost reports whether every dot-separated label of host is a
// number (decimal, octal with a leading 0, or hex with 0x): inet_aton's
// forms of an IPv4 address, which netip does not parse but a resolver may.
func numericHost(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		l := strings.ToLower(label)
		if h, ok := strings.CutPrefix(l, "0x"); ok {
			l = h
			if _, err := strconv.ParseUint(l, 16, 64); err != nil && l != "" {
				return false
			}
			continue
		}
		if _, err := strconv.ParseUint(l, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// metadataV6 is the IPv6 instance metadata endpoint (AWS).
var metadataV6 = netip.MustParseAddr("fd00:ec2::254")

// sharedSpace is RFC 6598's carrier-grade NAT range.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// CheckAddr refuses an address the policy does not allow.
func (p Policy) CheckAddr(addr netip.Addr) error {
	addr = addr.Unmap()
	switch {
	case addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast():
		return refused("%s is a link-local address (the range of cloud metadata endpoints)", addr)
	case addr == metadataV6:
		return refused("%s is a cloud metadata address", addr)
	case addr.IsUnspecified(), addr.IsMulticast(), addr.IsInterfaceLocalMulticast():
		return refused("%s is not a unicast address", addr)
	case p.denyPrivate() && (addr.IsLoopback() || addr.IsPrivate() || sharedSpace.Contains(addr)):
		return refused("%s is a loopback or private address, which %s=true refuses", addr, DenyPrivateEnv)
	}
	return nil
}

// Control is a net.Dialer Control function: it refuses a connection to an
// address the policy does not allow, after name resolution, so a name
// that resolves to a refused address is refused however it was checked
// when stored.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refused("cannot check the address %q: %v", address, err)
	}
	return p.CheckAddr(ap.Addr())
}

// Dialer is base with the policy's Control (base's own Control runs after).
func (p Policy) Dialer(base net.Dialer) *net.Dialer {
	prev := base.Control
	base.Control = func(network, address string, c syscall.RawConn) error {
		if err := p.Control(network, address, c); err != nil {
			return err
		}
		if prev != nil {
			return prev(network, address, c)
		}
		return nil
	}
	return &base
}
