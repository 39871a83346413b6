package service

import (
	"fmt"
	"net"
	"os"
)

// AdvertiseAddr returns the address other services should dial to reach a
// server listening on listen: advertise when it is set, otherwise listen
// with an empty or unspecified host (":7002", "0.0.0.0:7002") replaced by
// this machine's hostname.
func AdvertiseAddr(advertise, listen string) (string, error) {
	if advertise != "" {
		return advertise, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("error deriving advertise address from %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen, nil
	}
	hostname, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("error deriving advertise address: hostname: %w", err)
	}
	return net.JoinHostPort(hostname, port), nil
}
