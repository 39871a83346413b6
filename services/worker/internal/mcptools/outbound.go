package mcptools

import (
	"net"
	"net/http"
	"time"

	"github.com/chatd/chatd/pkg/outbound"
)

// policyTransport is http.DefaultTransport whose dialer checks every
// resolved address against the outbound policy: a server URL stored as a
// name may resolve to a metadata address by the time it is dialled (DNS
// rebinding). The API checked the URL itself when it was stored.
var policyTransport = newPolicyTransport(outbound.Default())

func newPolicyTransport(p outbound.Policy) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = p.Dialer(net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}
