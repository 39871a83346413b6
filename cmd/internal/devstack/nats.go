package devstack

import (
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startNATS runs the real nats-server in this process on a free loopback
// port.
func startNATS() (url string, stop func(), err error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		return "", nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return "", nil, errors.New("the in-process NATS server did not start within 10s")
	}
	return srv.ClientURL(), func() { srv.Shutdown(); srv.WaitForShutdown() }, nil
}
