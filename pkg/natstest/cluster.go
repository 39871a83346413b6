package natstest

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/chatd/chatd/pkg/localport"
)

// Cluster is a NATS cluster of in-process servers on loopback, each routed
// to every other, as production runs NATS.
type Cluster struct {
	Servers []*server.Server
}

// NewCluster starts n clustered servers and waits until each is routed to
// every other. They are shut down when the test ends.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, n)
	routes := make([]*url.URL, n)
	for i := range ports {
		port, release, err := localport.Reserve()
		if err != nil {
			t.Fatalf("natstest: reserve a cluster port: %v", err)
		}
		release() // the server binds it itself, at once
		ports[i] = port
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", port)}
	}
	c := &Cluster{}
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoLog:      true,
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: "chatd", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		})
		if err != nil {
			t.Fatalf("natstest: new cluster server: %v", err)
		}
		s.Start()
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		if !s.ReadyForConnections(readyTimeout) {
			t.Fatalf("natstest: cluster server %d not ready after %s", i+1, readyTimeout)
		}
		c.Servers = append(c.Servers, s)
	}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range c.Servers {
		for s.NumRoutes() < n-1 {
			if time.Now().After(deadline) {
				t.Fatalf("natstest: cluster not routed after %s (%d routes)", readyTimeout, s.NumRoutes())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return c
}

// URLs is every server's client URL, comma-separated: what
// CHATD_NATS_URL takes.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}
