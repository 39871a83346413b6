package subagents

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/queries"
)

// OrganizationOverrides reads the organization admin override of a
// subagent type from chat_organization_model_overrides, whose context is
// the type's name ("general" or "explore"), with the effort the subagent
// runs at (nil: the config's default) unless spawn_agent names one.
func OrganizationOverrides(pool *pgxpool.Pool) func(ctx context.Context, orgID uuid.UUID, kind Kind) (*Override, error) {
	return func(ctx context.Context, orgID uuid.UUID, kind Kind) (*Override, error) {
		row, err := queries.New(pool).ChatOrganizationModelOverrideGet(ctx, queries.ChatOrganizationModelOverrideGetParams{
			OrganizationID: orgID, Context: string(kind),
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("error reading the %s subagent override of organization %s: %w", kind, orgID, err)
		}
		id := row.ModelConfigID
		return &Override{Mode: ModeModel, ModelConfigID: &id, ReasoningEffort: row.ReasoningEffort}, nil
	}
}

// PersonalOverrides reads the chat owner's personal override of a subagent
// type from chat_user_model_overrides (user, organization, context = the
// type's name); set through /api/v2/users/me/chats/model-overrides.
func PersonalOverrides(pool *pgxpool.Pool) func(ctx context.Context, ownerID, orgID uuid.UUID, kind Kind) (*Override, error) {
	return func(ctx context.Context, ownerID, orgID uuid.UUID, kind Kind) (*Override, error) {
		row, err := queries.New(pool).ChatUserModelOverrideGet(ctx, queries.ChatUserModelOverrideGetParams{
			UserID: ownerID, OrganizationID: orgID, Context: string(kind),
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("error reading the personal %s subagent override of user %s: %w", kind, ownerID, err)
		}
		return &Override{Mode: Mode(row.Mode), ModelConfigID: row.ModelConfigID, ReasoningEffort: row.ReasoningEffort}, nil
	}
}
