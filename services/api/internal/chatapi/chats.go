package chatapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

// Title rules.
const (
	// DefaultTitle names a chat created without content or title.
	DefaultTitle     = "New Chat"
	maxTitleRunes    = 200
	fallbackTitleLen = 80
	maxSystemPrompt  = 64 << 10
	maxDynamicTools  = 64
)

// CreateChat applies Create: N → R0, or N → W when content is empty.
func (s *Server) CreateChat(ctx context.Context, req *chatdv1.CreateChatRequest) (*chatdv1.CreateChatResponse, error) {
	return s.CreateChatWith(ctx, req, turnwrite.Options{})
}

// CreateChatWith is CreateChat with opts' write in the creating
// transaction (its Turn names the prompt, or no message for an empty
// chat). The chat's client tools are req's; opts' tools are not used.
func (s *Server) CreateChatWith(ctx context.Context, req *chatdv1.CreateChatRequest, opts turnwrite.Options) (*chatdv1.CreateChatResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	requestID, err := validRequestID(req.RequestId)
	if err != nil {
		return nil, err
	}
	// A replay is looked up before anything the first request changed is
	// read: its attachments are linked now, and its model or project may be
	// gone, yet the replay answers as the first request did.
	var hash []byte
	if requestID != "" {
		hash = requestHash(c, req, func(m proto.Message) { m.(*chatdv1.CreateChatRequest).RequestId = nil })
		if err := priorRequest(ctx, s.q, c, kindCreateChat, requestID, hash); err != nil {
			return s.createReplay(ctx, err)
		}
	}
	content, err := s.userContent(req.GetContent(), true)
	if err != nil {
		return nil, err
	}
	p := chatstate.CreateParams{
		ID: s.newID(), OrganizationID: c.OrganizationID, OwnerID: c.UserID,
		SystemPrompt: req.GetSystemPrompt(),
	}
	if p.Title, p.TitleSource, err = createTitle(req.Title, content); err != nil {
		return nil, err
	}
	if len(p.SystemPrompt) > maxSystemPrompt {
		return nil, invalid("system_prompt is %d bytes; the limit is %d", len(p.SystemPrompt), maxSystemPrompt)
	}
	if p.DynamicTools, err = validDynamicTools(req.GetDynamicTools()); err != nil {
		return nil, err
	}
	requested, err := parseOptionalID("model_config_id", req.ModelConfigId)
	if err != nil {
		return nil, err
	}
	model, err := s.models.ResolveForChat(ctx, c.OrganizationID, requested)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	p.ModelConfigID = &model.ID
	project, err := s.callerProject(ctx, c, req.ProjectId)
	if err != nil {
		return nil, err
	}
	if project != nil {
		p.ProjectID = &project.ID
	}
	if content, err = chatfiles.Describe(ctx, s.q, c.UserID, c.OrganizationID, content); err != nil {
		return nil, s.fail(ctx, err)
	}
	if p.SystemPrompt != "" {
		p.Messages = append(p.Messages, chatstate.NewMessage{Role: chatstate.RoleSystem, Content: chatmsg.Content{chatmsg.Text(p.SystemPrompt)}})
	}
	if len(content) > 0 {
		p.Messages = append(p.Messages, chatstate.NewMessage{
			Role: chatstate.RoleUser, Content: content, ModelConfigID: &model.ID, CreatedBy: &c.UserID,
		})
	}

	if len(content) > 0 && s.hooks.Active() {
		// session_start and user_prompt_submit: a deny or a failed dispatch
		// creates no chat (hooks.go).
		ref := newChatRef(p.ID, c.UserID)
		turnID := s.newTurn(&ref)
		session, err := s.startSession(ctx, ref, false)
		if err != nil {
			return nil, err
		}
		if content, err = s.admitPrompt(ctx, ref, content); err != nil {
			return nil, err
		}
		content = append(content, session...) // hook parts (hooks.go)
		prompt := &p.Messages[len(p.Messages)-1]
		prompt.Content, prompt.TurnID = content, turnID
		if p.Title, p.TitleSource, err = createTitle(req.Title, content); err != nil {
			return nil, err
		}
	}
	var resp *chatdv1.CreateChatResponse
	p.InTx = func(ctx context.Context, tx *chatstate.Tx) error {
		if _, err := s.linkFiles(ctx, tx, content); err != nil {
			return err
		}
		chat, err := chatToProto(tx.Chat())
		if err != nil {
			return err
		}
		resp = &chatdv1.CreateChatResponse{Chat: chat}
		if requestID != "" {
			if err := recordRequest(ctx, tx.Queries(), c, kindCreateChat, requestID, p.ID, hash, resp); err != nil {
				return err
			}
		}
		if opts.Record == nil {
			return nil
		}
		turn := turnwrite.Turn{ChatID: p.ID}
		for _, m := range tx.CreatedMessages() {
			if m.Role == queries.ChatMessageRoleUser {
				turn.MessageID = &m.ID
			}
		}
		return opts.Record(turn)(tx.Queries())
	}
	if _, err := s.machine.Create(ctx, p); err != nil {
		if requestID != "" && isDuplicateRequest(err) {
			// A concurrent duplicate committed first: answer as it did.
			return s.createReplay(ctx, priorRequest(ctx, s.q, c, kindCreateChat, requestID, hash))
		}
		return nil, s.fail(ctx, err)
	}
	created(ctx)
	s.titleAfterCreate(p, content) // in the background: the response does not wait
	return resp, nil
}

func (s *Server) createReplay(ctx context.Context, err error) (*chatdv1.CreateChatResponse, error) {
	var resp chatdv1.CreateChatResponse
	if ok, derr := replay(err, &resp); ok {
		if derr != nil {
			return nil, s.fail(ctx, derr)
		}
		return &resp, nil
	}
	if err == nil {
		err = errors.New("request_id conflict vanished")
	}
	return nil, s.fail(ctx, err)
}

// createTitle applies the title rules: a user title wins; otherwise a
// fallback title from the prompt's first line, or "New Chat" without one.
func createTitle(title *string, content chatmsg.Content) (string, queries.ChatTitleSource, error) {
	if title != nil {
		t, err := userTitle(*title)
		return t, queries.ChatTitleSourceUser, err
	}
	return fallbackTitle(content.PlainText()), queries.ChatTitleSourceFallback, nil
}

func userTitle(t string) (string, error) {
	t = strings.TrimSpace(t)
	if t == "" {
		return "", invalid("title must not be empty")
	}
	if utf8.RuneCountInString(t) > maxTitleRunes {
		return "", invalid("title is longer than %d characters", maxTitleRunes)
	}
	return t, nil
}

// fallbackTitle derives a title from a prompt: its first non-blank line,
// whitespace collapsed, cut at a word boundary near fallbackTitleLen runes.
func fallbackTitle(prompt string) string {
	line := ""
	for _, l := range strings.Split(prompt, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			line = l
			break
		}
	}
	if line == "" {
		return DefaultTitle
	}
	runes := []rune(line)
	if len(runes) <= fallbackTitleLen {
		return line
	}
	cut := string(runes[:fallbackTitleLen])
	if i := strings.LastIndex(cut, " "); i > fallbackTitleLen/2 {
		cut = cut[:i]
	}
	return cut + "…"
}

func validDynamicTools(tools []*chatdv1.DynamicTool) ([]byte, error) {
	if len(tools) > maxDynamicTools {
		return nil, invalid("at most %d dynamic_tools", maxDynamicTools)
	}
	names := map[string]bool{}
	for i, t := range tools {
		name := t.GetName()
		if !validToolName(name) {
			return nil, invalid("dynamic_tools[%d]: name %q must be 1 to 64 letters, digits, '_' or '-'", i, name)
		}
		if names[name] {
			return nil, invalid("dynamic_tools[%d]: name %q is used twice", i, name)
		}
		names[name] = true
		if schema := t.GetInputSchema(); schema != nil {
			if typ, ok := schema.GetFields()["type"]; ok && typ.GetStringValue() != "object" {
				return nil, invalid("dynamic_tools[%d]: input_schema must describe an object (\"type\": \"object\")", i)
			}
		}
	}
	return dynamicToolsFromProto(tools)
}

func validToolName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// GetChat returns a chat the caller owns.
func (s *Server) GetChat(ctx context.Context, req *chatdv1.GetChatRequest) (*chatdv1.GetChatResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	chat, err := s.readChat(ctx, c, req.GetChatId())
	if err != nil {
		return nil, err
	}
	pc, err := chatToProto(chat)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &chatdv1.GetChatResponse{Chat: pc}, nil
}

// ListChats lists the caller's chats in the token's organization, newest
// first.
func (s *Server) ListChats(ctx context.Context, req *chatdv1.ListChatsRequest) (*chatdv1.ListChatsResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return nil, err
	}
	p := queries.ChatListByOwnerParams{OwnerID: c.UserID, OrganizationID: c.OrganizationID, Archived: req.Archived, PageLimit: size + 1}
	if req.GetPageToken() != "" {
		at, id, err := decodePageToken(req.GetPageToken())
		if err != nil {
			return nil, err
		}
		p.BeforeCreatedAt, p.BeforeID = &at, &id
	}
	rows, err := s.q.ChatListByOwner(ctx, p)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp := &chatdv1.ListChatsResponse{}
	if len(rows) > int(size) {
		rows = rows[:size]
		last := rows[len(rows)-1]
		resp.NextPageToken = encodePageToken(last.CreatedAt, last.ID)
	}
	for _, r := range rows {
		pc, err := chatToProto(r)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		resp.Chats = append(resp.Chats, pc)
	}
	return resp, nil
}

// UpdateChat archives or unarchives the chat's whole family (SetArchived on
// each member, atomically) and/or writes a user title.
func (s *Server) UpdateChat(ctx context.Context, req *chatdv1.UpdateChatRequest) (*chatdv1.UpdateChatResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if req.Archived == nil && req.Title == nil {
		return nil, invalid("nothing to update: set archived and/or title")
	}
	chat, err := s.readChat(ctx, c, req.GetChatId())
	if err != nil {
		return nil, err
	}
	var title string
	if req.Title != nil {
		if title, err = userTitle(*req.Title); err != nil {
			return nil, err
		}
	}
	if req.Archived != nil && *req.Archived != chat.Archived {
		if _, err := s.machine.SetFamilyArchived(ctx, chat.ID, *req.Archived); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	if req.Title != nil {
		if _, err := s.q.ChatSetTitle(ctx, queries.ChatSetTitleParams{
			ID: chat.ID, Title: title, TitleSource: queries.ChatTitleSourceUser, Now: s.now(),
		}); err != nil && !isNoRows(err) {
			return nil, s.fail(ctx, fmt.Errorf("set title of chat %s: %w", chat.ID, err))
		}
	}
	chat, err = s.readChat(ctx, c, req.GetChatId())
	if err != nil {
		return nil, err
	}
	pc, err := chatToProto(chat)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &chatdv1.UpdateChatResponse{Chat: pc}, nil
}
