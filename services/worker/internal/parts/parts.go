// Package parts is the worker's chatd.v1.PartsService, the parts endpoint
// relays read live message parts from. The implementation is
// github.com/chatd/chatd/pkg/partsrpc (importable, so that the relay's tests
// can run real PartsService servers); this package keeps the worker's name
// for it.
package parts

import (
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/partsrpc"
)

// Server implements chatd.v1.PartsService over a message part buffer; see
// partsrpc.Server.
type Server = partsrpc.Server

// Options configures a Server; see partsrpc.Options.
type Options = partsrpc.Options

// New returns a Server that streams the parts held by buf; see partsrpc.New.
func New(buf *partbuf.Buffer, opts Options) *Server { return partsrpc.New(buf, opts) }
