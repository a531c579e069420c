package event

import (
	"encoding/json"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"svc/platform/httpapi"
)

// FeedPage is the API's EventPage: events exactly as the webhook bodies
// carry them.
type FeedPage struct {
	// Events are the stored payloads, the bytes every delivery sends.
	Events     []json.RawMessage `json:"events"`
	NextCursor *string           `json:"next_cursor"`
}

// ToFeedPage renders a page of Feed.
func ToFeedPage(events []Event, next *uuid.UUID) FeedPage {
	out := FeedPage{Events: make([]json.RawMessage, len(events))}
	for i, e := range events {
		out.Events[i] = e.Payload
	}
	if next != nil {
		n := PublicID(*next)
		out.NextCursor = &n
	}
	return out
}

// feedRoutes registers the Events API on the /v1 router (readwrite):
//
//	GET /events?type=&created_after=&limit=&cursor=   {events, next_cursor}, stream order (Feed)
//	GET /events/{event_id}                            the event
//
// An event is the body its webhook delivery sends, byte for byte. limit is
// 1 to 200 (default 50); cursor is an evt_ id the list returned; every bad
// or unknown parameter is reported in one 422, by platform, which checks
// requests against openapi.json (httpapi.Validator.Router). An event_id
// that names no event, a malformed one included, is 404.
func (s *Service) feedRoutes(platform fiber.Router) {
	platform.Get("/events", s.handleFeed)
	platform.Get("/events/:event_id", s.handleFeedGet)
}

func (s *Service) handleFeed(c *fiber.Ctx) error {
	after, err := httpapi.QueryTime(c, "created_after")
	if err != nil {
		return err
	}
	args := c.Context().QueryArgs() // copies below: fiber reuses its buffers
	p := FeedParams{Type: Type(args.Peek("type")), CreatedAfter: after, Limit: c.QueryInt("limit", DefaultFeedLimit)}
	if args.Has("cursor") {
		id, err := ParseID(string(args.Peek("cursor")))
		if err != nil {
			return ErrBadCursor
		}
		p.Cursor = &id
	}
	events, next, err := s.Feed(c.UserContext(), p)
	if err != nil {
		return err
	}
	return c.JSON(ToFeedPage(events, next))
}

func (s *Service) handleFeedGet(c *fiber.Ctx) error {
	id, err := ParseID(httpapi.Param(c, "event_id"))
	if err != nil {
		return ErrNotFound // no event has that id
	}
	e, err := s.Get(c.UserContext(), id)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(e.Payload)
}
