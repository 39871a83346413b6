package llm_test

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
)

func TestScrubKeepsTheChain(t *testing.T) {
	err := llm.Scrub(errors.Join(io.EOF, errors.New("bad key sk-1 and sk-1 again")), "sk-1", "")
	require.Equal(t, "EOF\nbad key [REDACTED] and [REDACTED] again", err.Error())
	require.ErrorIs(t, err, io.EOF)
	require.Nil(t, llm.Scrub(nil, "x"))
}

func TestPublicLeavesOutUpstreamText(t *testing.T) {
	up := &llm.Error{Kind: llm.Fatal, StatusCode: 401, Provider: "acme", Upstream: true, Err: errors.New("Incorrect API key provided: sk-1")}
	require.Equal(t, `model call failed (fatal, HTTP 401): provider "acme" returned an error; the details are in the worker log`, llm.PublicMessage(up))
	require.NotContains(t, llm.PublicMessage(&llm.Error{Kind: llm.Retryable, Upstream: true, Err: errors.New("dial db-7")}), "db-7")
	own := llm.NewFatal(errors.New("a tool has no name"))
	require.Equal(t, own.Error(), llm.PublicMessage(own), "chatd's own messages stay whole")
	require.Equal(t, "plain", llm.PublicMessage(errors.New("plain")))
}
