package main

import "net/http"

// webUI is the handler of "/" in the dev stack: nil until the web UI lands
// (the stack then serves a short text page).
func webUI() http.Handler { return nil }
