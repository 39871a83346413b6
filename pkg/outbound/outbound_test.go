package outbound_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/outbound"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	open, closed := outbound.Policy{}, outbound.Policy{DenyPrivate: true}
	for _, tc := range []struct {
		url                string
		allowed, inPrivate bool // by the default policy, with DenyPrivate
	}{
		{"https://api.openai.com/v1", true, true},
		{"http://mcp.example.com:8080/mcp", true, true},
		{"https://8.8.8.8/v1", true, true},
		{"http://127.0.0.1:11434/v1", true, false},
		{"http://localhost:11434/v1", true, true}, // a name: checked at dial time
		{"http://10.1.2.3/v1", true, false},
		{"http://192.168.1.9/v1", true, false},
		{"http://[::1]:8080/", true, false},
		{"http://[fd12::1]/", true, false},
		{"http://100.64.0.1/", true, false},
		{"http://169.254.169.254/latest/meta-data/", false, false},
		{"http://169.254.1.1/", false, false},
		{"http://[fe80::1]/", false, false},
		{"http://[::ffff:169.254.169.254]/", false, false},
		{"http://[fd00:ec2::254]/", false, false},
		{"http://0.0.0.0/", false, false},
		{"http://2852039166/", false, false},
		{"http://0251.0376.0251.0376/", false, false},
		{"http://0xa9fea9fe/", false, false},
		{"http://0xa9.0xfe.0xa9.0xfe/", false, false},
		{"http://user:pass@api.example.com/", false, false},
		{"ftp://api.example.com/", false, false},
		{"file:///etc/passwd", false, false},
		{"api.example.com/v1", false, false},
		{"https://abc.de/", true, true}, // hex-looking letters are a name
		{"https://1password.example/", true, true},
	} {
		err := open.CheckURL(tc.url)
		require.Equal(t, tc.allowed, err == nil, "%s: %v", tc.url, err)
		if err != nil {
			require.ErrorIs(t, err, outbound.ErrRefused)
		}
		err = closed.CheckURL(tc.url)
		require.Equal(t, tc.inPrivate, err == nil, "DenyPrivate %s: %v", tc.url, err)
	}
}

// A name that resolves to a link-local address is refused when dialled:
// the dialer's resolver answers 169.254.169.254 for every name, as a
// rebinding DNS server would after the URL was stored.
func TestDialRefusesResolvedLinkLocal(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the request reached a server")
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	dns := fixedResolver(t, "169.254.169.254")
	d := outbound.Policy{}.Dialer(net.Dialer{Resolver: dns})
	_, err = d.DialContext(context.Background(), "tcp", net.JoinHostPort("models.example.test", port))
	require.ErrorIs(t, err, outbound.ErrRefused)
	require.Contains(t, err.Error(), "link-local")

	// The same dialer reaches a loopback address (allowed by default), and
	// refuses it with DenyPrivate.
	c, err := outbound.Policy{}.Dialer(net.Dialer{Resolver: fixedResolver(t, "127.0.0.1")}).
		DialContext(context.Background(), "tcp", net.JoinHostPort("models.example.test", port))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = outbound.Policy{DenyPrivate: true}.Dialer(net.Dialer{Resolver: fixedResolver(t, "127.0.0.1")}).
		DialContext(context.Background(), "tcp", net.JoinHostPort("models.example.test", port))
	require.True(t, errors.Is(err, outbound.ErrRefused), "%v", err)
}

// fixedResolver is a net.Resolver whose DNS server (in-process, over a
// net.Pipe) answers every A query with ip.
func fixedResolver(t *testing.T, ip string) *net.Resolver {
	t.Helper()
	addr := net.ParseIP(ip).To4()
	require.NotNil(t, addr)
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go answerDNS(server, addr)
		return client, nil
	}}
}

// answerDNS serves DNS-over-TCP framing on conn (the Go resolver uses the
// 2-byte length prefix on stream connections): each query gets one A
// record of addr, or no answer for other types.
func answerDNS(conn net.Conn, addr net.IP) {
	defer conn.Close()
	for {
		var l [2]byte
		if _, err := readFull(conn, l[:]); err != nil {
			return
		}
		q := make([]byte, int(l[0])<<8|int(l[1]))
		if _, err := readFull(conn, q); err != nil || len(q) < 12 {
			return
		}
		// The question ends after its name (labels until 0) and 4 bytes.
		end := 12
		for end < len(q) && q[end] != 0 {
			end += int(q[end]) + 1
		}
		end += 5
		if end > len(q) {
			return
		}
		qtype := int(q[end-4])<<8 | int(q[end-3])
		resp := append([]byte{}, q[:2]...)
		resp = append(resp, 0x81, 0x80, 0, 1) // response, recursion; one question
		if qtype == 1 {
			resp = append(resp, 0, 1) // one answer
		} else {
			resp = append(resp, 0, 0)
		}
		resp = append(resp, 0, 0, 0, 0)
		resp = append(resp, q[12:end]...)
		if qtype == 1 {
			resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
			resp = append(resp, addr...)
		}
		out := append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...)
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
