package fantasyprovider

import (
	"net"
	"net/http"
	"time"

	"github.com/chatd/chatd/pkg/outbound"
)

// Limits of every provider connection. None bounds a whole request: a
// stream lasts as long as the model's answer, and its silences are the
// caller's to bound (the worker's first-token and idle timeouts). A
// provider that stops answering before its response starts fails the
// attempt with a timeout, which is retryable.
const (
	// DialTimeout bounds establishing the TCP connection.
	DialTimeout = 30 * time.Second
	// TLSHandshakeTimeout bounds the TLS handshake.
	TLSHandshakeTimeout = 30 * time.Second
	// ResponseHeaderTimeout bounds the wait for the response's headers
	// once the request is sent. Hosted providers answer a streaming
	// request's headers within seconds; a self-hosted OpenAI-compatible
	// server may first load the model or read a long prompt, so the limit
	// matches the worker's default first-token timeout.
	ResponseHeaderTimeout = 5 * time.Minute
)

// connLimits are a transport's limits; zero is no limit.
type connLimits struct {
	dial, tlsHandshake, responseHeader time.Duration
}

var defaultLimits = connLimits{dial: DialTimeout, tlsHandshake: TLSHandshakeTimeout, responseHeader: ResponseHeaderTimeout}

// providerTransport is shared by every Model, so their connections are
// pooled as they were on http.DefaultTransport.
var providerTransport = newTransport(defaultLimits)

// newTransport is http.DefaultTransport (proxy from the environment,
// HTTP/2, idle-connection pooling) with limits l.
func newTransport(l connLimits) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// The outbound policy checks each resolved address: a base URL stored
	// as a name may resolve to a metadata address by now (DNS rebinding).
	t.DialContext = outbound.Default().Dialer(net.Dialer{Timeout: l.dial, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = l.tlsHandshake
	t.ResponseHeaderTimeout = l.responseHeader
	return t
}
