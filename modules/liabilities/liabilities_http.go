package liabilities

import (
	"context"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/httpapi"
	"svc/platform/sumtree"
	"svc/platform/timefmt"
)

// API serves the published roots and the users' and platform accounts'
// proofs.
type API struct {
	Service *Service
	// Assets reads the assets (formatting, and 404 for an unknown one).
	Assets bun.IDB
}

// Routes registers, on the platform router (/v1, readwrite):
//
//	GET /users/{external_user_id}/liabilities-proof?asset=
//	GET /platform-accounts/{platform_account}/liabilities-proof?asset=
//	GET /liabilities/roots
//
// and on the admin router (/v1/admin, admin):
//
//	GET /liabilities
//
// Both routers check requests against openapi.json
// (httpapi.Validator.Router): the handlers read their parameters as checked.
func (a *API) Routes(platform, admin fiber.Router) {
	platform.Get("/users/:external_user_id/liabilities-proof", a.proof)
	platform.Get("/platform-accounts/:platform_account/liabilities-proof", a.platformProof)
	// The published roots, for a platform to show its users beside their
	// proofs: the same list as the admin's.
	platform.Get("/liabilities/roots", a.published)
	admin.Get("/liabilities", a.published)
}

// PublishedView is one asset's latest published snapshot.
type PublishedView struct {
	Asset      string `json:"asset"`
	SnapshotID int64  `json:"snapshot_id"`
	SnapshotAt string `json:"snapshot_at"`
	Trigger    string `json:"trigger"`
	Users      int64  `json:"users"`
	// PlatformAccounts is the platform accounts' leaves (users counts
	// the users alone).
	PlatformAccounts int64  `json:"platform_accounts"`
	Root             string `json:"root"`
	Total            string `json:"total"`
	TotalUnits       string `json:"total_units"`
}

// PublishedList is GET /v1/admin/liabilities and GET /v1/liabilities/roots.
type PublishedList struct {
	Snapshots []PublishedView `json:"snapshots"`
}

// View renders p with its asset's decimals.
func View(p Published, a asset.Asset) PublishedView {
	return PublishedView{Asset: p.Asset, SnapshotID: p.ID, SnapshotAt: timefmt.Format(p.TakenAt), Trigger: p.Trigger,
		Users: p.Users, PlatformAccounts: p.PlatformAccounts, Root: sumtree.HexOf(p.Root), Total: a.Format(p.Total), TotalUnits: formatUnits(p.Total)}
}

func formatUnits(n int64) string { return strconv.FormatInt(n, 10) }

func (a *API) published(c *fiber.Ctx) error {
	ctx := c.UserContext()
	list, err := a.Service.Latest(ctx)
	if err != nil {
		return err
	}
	out, err := Views(ctx, a.Assets, list)
	if err != nil {
		return err
	}
	return c.JSON(PublishedList{Snapshots: out})
}

// Views renders snapshots with their assets' decimals.
func Views(ctx context.Context, assets bun.IDB, list []Published) ([]PublishedView, error) {
	all, err := (&asset.Store{DB: assets}).All(ctx)
	if err != nil {
		return nil, err
	}
	byCode := map[string]asset.Asset{}
	for _, x := range all {
		byCode[x.Code] = x
	}
	out := make([]PublishedView, len(list))
	for i, p := range list {
		out[i] = View(p, byCode[p.Asset])
	}
	return out, nil
}

func (a *API) proof(c *fiber.Ctx) error {
	user := httpapi.Param(c, "external_user_id")
	code := string(c.Context().QueryArgs().Peek("asset")) // a copy: fiber reuses its buffers
	ctx := c.UserContext()
	if _, err := (&asset.Store{DB: a.Assets}).Get(ctx, code); err != nil {
		return err
	}
	p, err := a.Service.Proof(ctx, code, user)
	if err != nil {
		return err
	}
	return c.JSON(p)
}

func (a *API) platformProof(c *fiber.Ctx) error {
	name := httpapi.Param(c, "platform_account")
	code := string(c.Context().QueryArgs().Peek("asset")) // a copy: fiber reuses its buffers
	ctx := c.UserContext()
	if _, err := (&asset.Store{DB: a.Assets}).Get(ctx, code); err != nil {
		return err
	}
	p, err := a.Service.PlatformProof(ctx, code, name)
	if err != nil {
		return err
	}
	return c.JSON(p)
}
