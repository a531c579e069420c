package event

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/timefmt"
)

// TypePing is the type of the event POST .../{id}/test sends to one
// endpoint: never written to the outbox, never listed, never retried.
const TypePing Type = "ping"

// EndpointRecord is an endpoint as the API shows it: never its secret.
type EndpointRecord struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description *string  `json:"description"`
	Disabled    bool     `json:"disabled"`
	// PreviousSecretExpiresAt is when the secret a rotation replaced stops
	// signing; null outside a rotation's overlap.
	PreviousSecretExpiresAt *string `json:"previous_secret_expires_at"`
	CreatedAt               string  `json:"created_at"`
	UpdatedAt               string  `json:"updated_at"`
}

// EndpointWithSecret is the answer of a creation or a rotation: the
// endpoint and its new signing secret, shown in that answer only (a
// replay of the same Idempotency-Key answers null: the secret is never
// stored readable).
type EndpointWithSecret struct {
	EndpointRecord
	Secret *string `json:"secret"`
}

// ToEndpointRecord renders an endpoint at now.
func ToEndpointRecord(ep Endpoint, now time.Time) EndpointRecord {
	r := EndpointRecord{ID: ep.ID.String(), URL: ep.URL, Events: ep.Events, Description: ep.Description, Disabled: ep.Disabled,
		CreatedAt: timefmt.Format(ep.CreatedAt), UpdatedAt: timefmt.Format(ep.UpdatedAt)}
	if r.Events == nil {
		r.Events = []string{}
	}
	if u := ep.PreviousSecretUntil; u != nil && now.Before(*u) {
		at := timefmt.Format(*u)
		r.PreviousSecretExpiresAt = &at
	}
	return r
}

// PingResult is the answer of a test: what came of the one attempt.
type PingResult struct {
	ID        string  `json:"id"`
	Delivered bool    `json:"delivered"`
	Error     *string `json:"error"`
}

// Ping sends ep one signed ping event, now, once, and says what came of
// it: {id, type: "ping", created_at, data: {endpoint_id}}, signed as its
// deliveries are (both secrets during a rotation's overlap).
func (d *Deliverer) Ping(ctx context.Context, ep Endpoint) (PingResult, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return PingResult{}, err
	}
	now := d.Now().UTC().Truncate(time.Microsecond)
	body, err := json.Marshal(struct {
		ID        string `json:"id"`
		Type      Type   `json:"type"`
		CreatedAt string `json:"created_at"`
		Data      struct {
			EndpointID string `json:"endpoint_id"`
		} `json:"data"`
	}{ID: PublicID(id), Type: TypePing, CreatedAt: timefmt.Format(now), Data: struct {
		EndpointID string `json:"endpoint_id"`
	}{ep.ID.String()}})
	if err != nil {
		return PingResult{}, err
	}
	res := PingResult{ID: PublicID(id), Delivered: true}
	if failure := d.postToEndpoint(ctx, ep, body, now); failure != "" {
		res.Delivered, res.Error = false, &failure
	}
	return res, nil
}

// EndpointRoutes registers the webhook endpoints' admin routes on the
// /v1/admin router (docs/webhooks.md, "Webhook endpoints"); idem is the
// Idempotency-Key middleware:
//
//	POST /admin/webhook-endpoints                     {url, events, description?, disabled?} -> 201 endpoint + secret
//	GET  /admin/webhook-endpoints                     {endpoints: [endpoint]}
//	GET  /admin/webhook-endpoints/{id}                endpoint
//	POST /admin/webhook-endpoints/{id}                {url?, events?, description?, disabled?} -> endpoint
//	POST /admin/webhook-endpoints/{id}/rotate-secret  {overlap_seconds?} -> endpoint + secret
//	POST /admin/webhook-endpoints/{id}/test           {id, delivered, error}: a ping, sent once, now
//	GET  /admin/webhook-deliveries?status=&endpoint_id=&limit=
//	                                                  {deliveries: [delivery]}, newest event first
//
// An update is a POST of the fields to change (a partial update), as every
// other mutation of the API is a POST with an Idempotency-Key. An id that
// names no endpoint, a malformed one included, is 404.
func (s *EndpointService) EndpointRoutes(admin fiber.Router, idem fiber.Handler, pinger *Deliverer) {
	admin.Post("/webhook-endpoints", idem, s.handleCreate)
	admin.Get("/webhook-endpoints", s.handleList)
	admin.Get("/webhook-endpoints/:endpoint_id", s.handleGet)
	admin.Post("/webhook-endpoints/:endpoint_id", idem, s.handleUpdate)
	admin.Post("/webhook-endpoints/:endpoint_id/rotate-secret", idem, s.handleRotate)
	admin.Post("/webhook-endpoints/:endpoint_id/test", idem, func(c *fiber.Ctx) error { return s.handleTest(c, pinger) })
	admin.Get("/webhook-deliveries", s.handleDeliveries)
}

// DeliveryListItem is a delivery in the list of deliveries: with its
// event's ids and type.
type DeliveryListItem struct {
	DeliveryRecord
	EventID    string `json:"event_id"`
	EventRawID string `json:"event_raw_id"`
	EventType  Type   `json:"event_type"`
	CreatedAt  string `json:"created_at"`
}

// DeliveryListParams filter ListDeliveries.
type DeliveryListParams struct {
	Status     Status    // empty: every status
	EndpointID uuid.UUID // uuid.Nil: every endpoint
	Limit      int       // 1 to 200; 0 means 50
}

// ListDeliveries returns endpoint deliveries, newest event first.
func (s *EndpointService) ListDeliveries(ctx context.Context, p DeliveryListParams) ([]DeliveryListItem, error) {
	if p.Limit <= 0 {
		p.Limit = 50
	}
	var rows []struct {
		Delivery
		Type Type `bun:"type"`
	}
	q := s.DB.NewSelect().TableExpr("public.webhook_deliveries AS x").
		ColumnExpr("x.event_id, x.endpoint_id, x.status, x.attempts, x.next_attempt_at, x.last_error, x.created_at, x.delivered_at, x.dead_at, x.redeliveries, e.type").
		Join("JOIN public.outbound_events AS e ON e.id = x.event_id").
		OrderExpr("x.created_at DESC, x.event_id DESC, x.endpoint_id").Limit(int64(p.Limit))
	if p.Status != "" {
		q = q.Where("x.status = ?", p.Status)
	}
	if p.EndpointID != uuid.Nil {
		q = q.Where("x.endpoint_id = ?", p.EndpointID)
	}
	if err := q.Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("list endpoint deliveries: %w", err)
	}
	out := make([]DeliveryListItem, 0, len(rows))
	for _, r := range rows {
		out = append(out, DeliveryListItem{DeliveryRecord: ToDeliveryRecord(r.Delivery), EventID: PublicID(r.EventID),
			EventRawID: r.EventID.String(), EventType: r.Type, CreatedAt: timefmt.Format(r.CreatedAt)})
	}
	return out, nil
}

func (s *EndpointService) handleDeliveries(c *fiber.Ctx) error {
	args := c.Context().QueryArgs()
	p := DeliveryListParams{Status: Status(args.Peek("status")), Limit: c.QueryInt("limit", 50)}
	if v := args.Peek("endpoint_id"); len(v) > 0 {
		id, err := uuid.ParseBytes(v) // the document checked its format
		if err != nil {
			return fault.Validation(fault.FieldError{Loc: []any{"query", "endpoint_id"}, Msg: "Input should be a valid UUID", Type: "uuid_parsing"})
		}
		p.EndpointID = id
	}
	out, err := s.ListDeliveries(c.UserContext(), p)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"deliveries": out})
}

func endpointID(c *fiber.Ctx) (uuid.UUID, error) {
	id, err := uuid.Parse(httpapi.Param(c, "endpoint_id"))
	if err != nil {
		return uuid.Nil, ErrEndpointNotFound
	}
	return id, nil
}

func (s *EndpointService) handleList(c *fiber.Ctx) error {
	eps, err := s.ListEndpoints(c.UserContext())
	if err != nil {
		return err
	}
	now := s.Now()
	out := make([]EndpointRecord, 0, len(eps))
	for _, ep := range eps {
		out = append(out, ToEndpointRecord(ep, now))
	}
	return c.JSON(fiber.Map{"endpoints": out})
}

func (s *EndpointService) handleGet(c *fiber.Ctx) error {
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	ep, err := s.GetEndpoint(c.UserContext(), s.DB, id)
	if err != nil {
		return err
	}
	return c.JSON(ToEndpointRecord(ep, s.Now()))
}

func (s *EndpointService) handleCreate(c *fiber.Ctx) error {
	var p EndpointParams
	if err := httpapi.DecodeBody(c, &p); err != nil {
		return err
	}
	return s.mutate(c, fiber.StatusCreated, func(ctx context.Context, tx bun.Tx, actor audit.Actor) (Endpoint, *string, error) {
		ep, secret, err := s.Create(ctx, tx, p, actor)
		return ep, &secret, err
	})
}

func (s *EndpointService) handleUpdate(c *fiber.Ctx) error {
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	var p EndpointParams
	if err := httpapi.DecodeBody(c, &p); err != nil {
		return err
	}
	return s.mutate(c, fiber.StatusOK, func(ctx context.Context, tx bun.Tx, actor audit.Actor) (Endpoint, *string, error) {
		ep, err := s.Update(ctx, tx, id, p, actor)
		return ep, nil, err
	})
}

func (s *EndpointService) handleRotate(c *fiber.Ctx) error {
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	var req struct {
		OverlapSeconds *int64 `json:"overlap_seconds"`
	}
	if len(c.BodyRaw()) > 0 {
		if err := httpapi.DecodeBody(c, &req); err != nil {
			return err
		}
	}
	overlap := DefaultRotationOverlap
	if req.OverlapSeconds != nil {
		if *req.OverlapSeconds < 0 || *req.OverlapSeconds > int64(MaxRotationOverlap/time.Second) {
			return fault.Validation(fault.FieldError{Loc: []any{"body", "overlap_seconds"}, Type: "value_error", Input: *req.OverlapSeconds,
				Msg: fmt.Sprintf("Value error, must be 0 to %d seconds", int64(MaxRotationOverlap/time.Second))})
		}
		overlap = time.Duration(*req.OverlapSeconds) * time.Second
	}
	return s.mutate(c, fiber.StatusOK, func(ctx context.Context, tx bun.Tx, actor audit.Actor) (Endpoint, *string, error) {
		ep, secret, err := s.RotateSecret(ctx, tx, id, overlap, actor)
		return ep, &secret, err
	})
}

func (s *EndpointService) handleTest(c *fiber.Ctx, pinger *Deliverer) error {
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	ep, err := s.GetEndpoint(c.UserContext(), s.DB, id)
	if err != nil {
		return err
	}
	res, err := pinger.Ping(c.UserContext(), ep)
	if err != nil {
		return err
	}
	return c.JSON(res)
}

// mutate runs fn in a transaction that also completes the request's
// Idempotency-Key with its answer, and answers with status. A secret fn
// returns is in this answer only: the stored one, which a replay gets,
// says null.
func (s *EndpointService) mutate(c *fiber.Ctx, status int, fn func(ctx context.Context, tx bun.Tx, actor audit.Actor) (Endpoint, *string, error)) error {
	actor, err := apikey.ActorFrom(c)
	if err != nil {
		return err
	}
	rec := idempotency.FromCtx(c)
	var body []byte
	err = db.RunInTx(c.UserContext(), s.DB, func(ctx context.Context, tx bun.Tx) error {
		ep, secret, err := fn(ctx, tx, actor)
		if err != nil {
			return err
		}
		r := ToEndpointRecord(ep, s.Now())
		var stored []byte
		if secret != nil {
			if body, err = json.Marshal(EndpointWithSecret{EndpointRecord: r, Secret: secret}); err != nil {
				return err
			}
			if stored, err = json.Marshal(EndpointWithSecret{EndpointRecord: r}); err != nil {
				return err
			}
		} else {
			if body, err = json.Marshal(r); err != nil {
				return err
			}
			stored = body
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, status, fiber.MIMEApplicationJSON, stored)
	})
	return idempotency.SendJSON(c, rec, err, status, body)
}
