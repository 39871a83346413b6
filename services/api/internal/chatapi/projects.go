package chatapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// maxProjectNameRunes bounds a project's name.
const maxProjectNameRunes = 200

// CreateProject creates a project of the caller. Root chats created in it
// (CreateChatRequest.project_id) share its memory.
func (s *Server) CreateProject(ctx context.Context, req *chatdv1.CreateProjectRequest) (*chatdv1.CreateProjectResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.GetName())
	if name == "" || utf8.RuneCountInString(name) > maxProjectNameRunes {
		return nil, invalid("name must be 1 to %d characters", maxProjectNameRunes)
	}
	p, err := s.q.ProjectInsert(ctx, queries.ProjectInsertParams{
		ID: s.newID(), OrganizationID: c.OrganizationID, OwnerID: c.UserID, Name: name, Now: s.now(),
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, status.Errorf(codes.AlreadyExists, "you already have a project named %q", name)
	}
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("create project: %w", err))
	}
	created(ctx)
	return &chatdv1.CreateProjectResponse{Project: projectToProto(p)}, nil
}

// ListProjects lists the caller's projects in their organization.
func (s *Server) ListProjects(ctx context.Context, req *chatdv1.ListProjectsRequest) (*chatdv1.ListProjectsResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return nil, err
	}
	p := queries.ProjectListByOwnerParams{OwnerID: c.UserID, OrganizationID: c.OrganizationID, PageLimit: size + 1}
	if req.GetPageToken() != "" {
		at, id, err := decodePageToken(req.GetPageToken())
		if err != nil {
			return nil, err
		}
		p.AfterCreatedAt, p.AfterID = &at, &id
	}
	rows, err := s.q.ProjectListByOwner(ctx, p)
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("list projects: %w", err))
	}
	out := &chatdv1.ListProjectsResponse{}
	if len(rows) > int(size) {
		rows = rows[:size]
		last := rows[len(rows)-1]
		out.NextPageToken = encodePageToken(last.CreatedAt, last.ID)
	}
	out.Projects = make([]*chatdv1.Project, 0, len(rows))
	for _, p := range rows {
		out.Projects = append(out.Projects, projectToProto(p))
	}
	return out, nil
}

// callerProject validates CreateChatRequest.project_id: unset is no
// project; otherwise it must be one of the caller's projects (another
// user's project reads as missing).
func (s *Server) callerProject(ctx context.Context, c auth.Claims, raw *string) (*queries.ChatProject, error) {
	id, err := parseOptionalID("project_id", raw)
	if err != nil || id == nil {
		return nil, err
	}
	p, err := s.q.ProjectGet(ctx, *id)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !c.Owns(p.OwnerID, p.OrganizationID)) {
		return nil, status.Errorf(codes.NotFound, "project %s not found", *id)
	}
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("read project %s: %w", *id, err))
	}
	return &p, nil
}

func projectToProto(p queries.ChatProject) *chatdv1.Project {
	return &chatdv1.Project{
		Id: p.ID.String(), OrganizationId: p.OrganizationID.String(), OwnerId: p.OwnerID.String(),
		Name: p.Name, CreatedAt: timestamppb.New(p.CreatedAt),
	}
}
