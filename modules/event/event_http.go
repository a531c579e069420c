package event

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/timefmt"
)

// Record is the SPEC's outbound event record (admin view).
type Record struct {
	ID            string          `json:"id"`
	RawID         string          `json:"raw_id"`
	Type          Type            `json:"type"`
	Status        Status          `json:"status"`
	Attempts      int             `json:"attempts"`
	NextAttemptAt string          `json:"next_attempt_at"`
	LastError     *string         `json:"last_error"`
	CreatedAt     string          `json:"created_at"`
	Payload       json.RawMessage `json:"payload"`
	// Deliveries are the event's deliveries to webhook endpoints ([] when
	// it has none); Status and the fields above are its delivery to
	// PLATFORM_WEBHOOK_URL.
	Deliveries []DeliveryRecord `json:"deliveries"`
}

// DeliveryRecord is one event's delivery to one webhook endpoint, admin
// view.
type DeliveryRecord struct {
	EndpointID    string  `json:"endpoint_id"`
	Status        Status  `json:"status"`
	Attempts      int     `json:"attempts"`
	NextAttemptAt string  `json:"next_attempt_at"`
	LastError     *string `json:"last_error"`
	DeliveredAt   *string `json:"delivered_at"`
}

// ToDeliveryRecord renders a delivery for operators.
func ToDeliveryRecord(x Delivery) DeliveryRecord {
	r := DeliveryRecord{EndpointID: x.EndpointID.String(), Status: x.Status, Attempts: x.Attempts,
		NextAttemptAt: timefmt.Format(x.NextAttemptAt), LastError: x.LastError}
	if x.DeliveredAt != nil {
		at := timefmt.Format(*x.DeliveredAt)
		r.DeliveredAt = &at
	}
	return r
}

// ToRecord renders an event for operators.
func ToRecord(e Event) Record {
	return Record{
		ID: e.PublicID(), RawID: e.ID.String(), Type: e.Type, Status: e.Status, Attempts: e.Attempts,
		NextAttemptAt: timefmt.Format(e.NextAttemptAt), LastError: e.LastError, CreatedAt: timefmt.Format(e.CreatedAt),
		Payload: e.Payload, Deliveries: []DeliveryRecord{},
	}
}

// RedeliverResponse is the body of a redelivery.
type RedeliverResponse struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
}

// Routes registers the Events API on the /v1 router (readwrite; see
// feedRoutes) and the operators' endpoints on the /v1/admin router; idem is
// the Idempotency-Key middleware that mutating routes need.
//
//	GET  /admin/events?status=&limit=          {events: [Record]}, newest first (replica: Service.Replica),
//	                                           each with its endpoint deliveries
//	POST /admin/events/{event_id}/redeliver    {endpoint_id?} -> {id, status}, signed (RedeliverExpect or
//	                                           RedeliverEndpointExpect; the Svc-Operator-Signature header)
//
// Both routers check requests against openapi.json
// (httpapi.Validator.Router): a status that is not one of the three, a
// limit out of range and a parameter the list does not take are one 422.
// event_id is the raw uuid (raw_id) or the evt_ id the list and the
// payloads show. Anything that names no event, a malformed id included, is
// 404; an event that is not dead is 409.
func (s *Service) Routes(platform, admin fiber.Router, idem fiber.Handler) {
	s.feedRoutes(platform)
	admin.Get("/events", s.handleList)
	admin.Post("/events/:event_id/redeliver", idem, s.handleRedeliver)
}

func (s *Service) handleList(c *fiber.Ctx) error {
	args := c.Context().QueryArgs() // copies below: fiber reuses its buffers
	out, err := s.Records(c.UserContext(), ListParams{Status: Status(args.Peek("status")), Limit: c.QueryInt("limit", 50)})
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"events": out})
}

// Records is the operators' list of events (GET /v1/admin/events, the
// console's events page): newest first, each with its endpoint
// deliveries, read with Replica when there is one.
func (s *Service) Records(ctx context.Context, p ListParams) ([]Record, error) {
	var (
		events     []Event
		deliveries map[uuid.UUID][]Delivery
	)
	err := s.Replica.Read(ctx, s.DB, func(ctx context.Context, idb bun.IDB) error {
		var err error
		if events, err = list(ctx, idb, p); err != nil {
			return err
		}
		ids := make([]uuid.UUID, len(events))
		for i, e := range events {
			ids[i] = e.ID
		}
		deliveries, err = deliveriesOf(ctx, idb, ids)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(events))
	for _, e := range events {
		r := ToRecord(e)
		for _, x := range deliveries[e.ID] {
			r.Deliveries = append(r.Deliveries, ToDeliveryRecord(x))
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Service) handleRedeliver(c *fiber.Ctx) error {
	raw := httpapi.Param(c, "event_id")
	id, err := ParseID(raw)
	if err != nil {
		return ErrNotFound // no event has that id
	}
	actor, err := apikey.ActorFrom(c)
	if err != nil {
		return err
	}
	sig, err := operator.EnvelopeFrom(c)
	if err != nil {
		return err
	}
	// An optional body names the endpoint whose delivery to redeliver.
	var req struct {
		EndpointID *string `json:"endpoint_id"`
	}
	if len(bytes.TrimSpace(c.BodyRaw())) > 0 {
		if err := httpapi.DecodeBody(c, &req); err != nil {
			return err
		}
	}
	endpoint := uuid.Nil
	if req.EndpointID != nil {
		if endpoint, err = uuid.Parse(*req.EndpointID); err != nil {
			return fault.Validation(fault.FieldError{Loc: []any{"body", "endpoint_id"}, Msg: "Input should be a valid UUID",
				Type: "uuid_parsing", Input: *req.EndpointID})
		}
	}
	rec := idempotency.FromCtx(c)
	var body []byte
	err = db.RunInTx(c.UserContext(), s.DB, func(ctx context.Context, tx bun.Tx) error {
		var res RedeliverResponse
		if endpoint == uuid.Nil {
			e, err := s.RedeliverTx(ctx, tx, id, actor, sig)
			if err != nil {
				return err
			}
			res = RedeliverResponse{ID: e.PublicID(), Status: e.Status}
		} else {
			e, x, err := s.RedeliverEndpointTx(ctx, tx, id, endpoint, actor, sig)
			if err != nil {
				return err
			}
			res = RedeliverResponse{ID: e.PublicID(), Status: x.Status}
		}
		var err error
		if body, err = json.Marshal(res); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, fiber.StatusOK, fiber.MIMEApplicationJSON, body)
	})
	if err != nil {
		err = fmt.Errorf("redeliver: %w", err)
	}
	return idempotency.SendJSON(c, rec, err, fiber.StatusOK, body)
}
