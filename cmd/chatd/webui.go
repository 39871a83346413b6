package main

import (
	"net/http"

	"github.com/chatd/chatd/pkg/webui"
)

// webUI is the handler of "/" in the dev stack: the embedded web chat UI.
func webUI() http.Handler { return webui.Handler() }
