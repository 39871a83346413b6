package fantasyprovider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
)

func TestProviderTransportLimits(t *testing.T) {
	t.Parallel()
	require.Equal(t, ResponseHeaderTimeout, providerTransport.ResponseHeaderTimeout)
	require.Equal(t, TLSHandshakeTimeout, providerTransport.TLSHandshakeTimeout)
	require.NotNil(t, providerTransport.DialContext)
	require.Zero(t, httpClient().Timeout, "nothing bounds a whole stream")
}

// A provider that accepts the request and never answers its headers fails
// the attempt with a retryable timeout instead of holding it.
func TestResponseHeaderTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // stall before the headers
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	client := &http.Client{Transport: newTransport(connLimits{dial: time.Second, responseHeader: 200 * time.Millisecond})}

	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the request waited past its response-header timeout")
	}
	require.ErrorContains(t, err, "timeout awaiting response headers")
	require.True(t, llm.IsTransient(err))
	require.Equal(t, llm.Retryable, classify(context.Background(), err).Kind)
}
