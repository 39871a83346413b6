package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/chatd/chatd/cmd/internal/loadgen"
)

// chatClient calls chatd's REST facade (/api/v2 on the api) and its stream
// endpoint (GET /api/v2/chats/{chat}/stream, which production serves behind
// the same URL and tests may serve elsewhere).
type chatClient struct {
	baseURL   string // scheme://host[:port][/prefix], no trailing slash
	streamURL string // the same for the stream endpoint
	token     string
	// http serves the REST calls (with a timeout); stream serves the SSE
	// connection (without one: it lasts as long as the watch).
	http   *http.Client
	stream *http.Client
}

// restTimeout bounds one REST call.
const restTimeout = 30 * time.Second

func newChatClient(baseURL, streamURL, token string) *chatClient {
	return &chatClient{
		baseURL:   baseURL,
		streamURL: streamURL,
		token:     token,
		http:      &http.Client{Timeout: restTimeout},
		stream:    &http.Client{},
	}
}

// normalizeURL accepts "host:port", "http://host:port/" or ".../api/v2" and
// returns the base the /api/v2 paths are appended to.
func normalizeURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("%q is not an http(s) URL such as http://localhost:8080", raw)
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v2")
	return strings.TrimSuffix(u.String(), "/"), nil
}

// apiError is an error response of the REST facade or the stream:
// {"message", "code", "reason"}.
type apiError = loadgen.HTTPError

// readAPIError turns a non-2xx response into an *apiError.
func readAPIError(resp *http.Response) *apiError { return loadgen.ReadHTTPError(resp) }

// do sends a JSON request to the api and decodes a 2xx JSON answer into
// out (unless out is nil).
func (c *chatClient) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	u := c.baseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return connError(c.baseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return readAPIError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: unreadable answer: %w", method, path, err)
	}
	return nil
}

// connError explains a transport failure.
func connError(base string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	return fmt.Errorf("cannot reach %s: %w", base, err)
}

// The REST shapes the CLI reads and writes (see proto/chatd/v1 and
// docs/api.md).

type chatPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolName   string          `json:"tool_name,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	IsError    bool            `json:"is_error,omitempty"`
	Name       string          `json:"name,omitempty"`
	// Hook, on a hook-notice part, names the lifecycle event.
	Hook string `json:"hook,omitempty"`
	// The live parts of a running tool call (tool-status, tool-progress).
	State      string   `json:"state,omitempty"`
	DurationMS *int64   `json:"duration_ms,omitempty"`
	Progress   *float64 `json:"progress,omitempty"`
	Total      *float64 `json:"total,omitempty"`
	Message    string   `json:"message,omitempty"`
}

type chatInfo struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Status    string    `json:"status"`
	Archived  bool      `json:"archived"`
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

type chatMessage struct {
	ID      json.Number `json:"id"`
	Role    string      `json:"role"`
	Content []chatPart  `json:"content"`
}

type queuedMessage struct {
	ID       json.Number `json:"id"`
	Position json.Number `json:"position"`
}

type createChatRequest struct {
	Content       []chatPart `json:"content,omitempty"`
	Title         string     `json:"title,omitempty"`
	ModelConfigID string     `json:"model_config_id,omitempty"`
}

type sendMessageRequest struct {
	Content      []chatPart `json:"content"`
	BusyBehavior string     `json:"busy_behavior,omitempty"`
}

type sendMessageResponse struct {
	Queued        bool           `json:"queued"`
	Message       *chatMessage   `json:"message"`
	QueuedMessage *queuedMessage `json:"queued_message"`
}

type listChatsResponse struct {
	Chats         []chatInfo `json:"chats"`
	NextPageToken string     `json:"next_page_token"`
}

func textContent(text string) []chatPart {
	return []chatPart{{Type: "text", Text: text}}
}

// createChat is POST /api/v2/chats; raw is the chat object as sent.
func (c *chatClient) createChat(ctx context.Context, in createChatRequest) (chatInfo, json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/api/v2/chats", nil, in, &raw); err != nil {
		return chatInfo{}, nil, err
	}
	var ch chatInfo
	err := json.Unmarshal(raw, &ch)
	return ch, raw, err
}

// sendMessage is POST /api/v2/chats/{chat}/messages.
func (c *chatClient) sendMessage(ctx context.Context, chatID string, in sendMessageRequest) (sendMessageResponse, json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/api/v2/chats/"+chatID+"/messages", nil, in, &raw); err != nil {
		return sendMessageResponse{}, nil, err
	}
	var out sendMessageResponse
	err := json.Unmarshal(raw, &out)
	return out, raw, err
}

// listChats is GET /api/v2/chats, every page.
func (c *chatClient) listChats(ctx context.Context, archived bool) ([]chatInfo, []json.RawMessage, error) {
	var chats []chatInfo
	var raws []json.RawMessage
	token := ""
	for {
		q := url.Values{"archived": {fmt.Sprint(archived)}, "page_size": {"200"}}
		if token != "" {
			q.Set("page_token", token)
		}
		var page struct {
			Chats         []json.RawMessage `json:"chats"`
			NextPageToken string            `json:"next_page_token"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v2/chats", q, nil, &page); err != nil {
			return nil, nil, err
		}
		for _, raw := range page.Chats {
			var ch chatInfo
			if err := json.Unmarshal(raw, &ch); err != nil {
				return nil, nil, err
			}
			chats, raws = append(chats, ch), append(raws, raw)
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			return chats, raws, nil
		}
		token = page.NextPageToken
	}
}

// listMessages is GET /api/v2/chats/{chat}/messages, every page from the
// start of the chat (after=0, then each page's newer_after).
func (c *chatClient) listMessages(ctx context.Context, chatID string, pageSize int) ([]chatMessage, []json.RawMessage, error) {
	var msgs []chatMessage
	var raws []json.RawMessage
	after := "0"
	for {
		q := url.Values{"after": {after}, "page_size": {fmt.Sprint(pageSize)}}
		var page struct {
			Messages   []json.RawMessage `json:"messages"`
			NewerAfter json.Number       `json:"newer_after"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v2/chats/"+chatID+"/messages", q, nil, &page); err != nil {
			return nil, nil, err
		}
		for _, raw := range page.Messages {
			var m chatMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, nil, err
			}
			msgs, raws = append(msgs, m), append(raws, raw)
		}
		next := page.NewerAfter.String()
		if next == "" || next == "0" || next == after {
			return msgs, raws, nil
		}
		after = next
	}
}

// interruptChat is POST /api/v2/chats/{chat}/interrupt.
func (c *chatClient) interruptChat(ctx context.Context, chatID string) (chatInfo, error) {
	var ch chatInfo
	err := c.do(ctx, http.MethodPost, "/api/v2/chats/"+chatID+"/interrupt", nil, struct{}{}, &ch)
	return ch, err
}

// setArchived is PATCH /api/v2/chats/{chat} with {"archived": ...}.
func (c *chatClient) setArchived(ctx context.Context, chatID string, archived bool) (chatInfo, error) {
	var ch chatInfo
	err := c.do(ctx, http.MethodPatch, "/api/v2/chats/"+chatID, nil, map[string]bool{"archived": archived}, &ch)
	return ch, err
}
