// Package alert owns operator alerts: durable records of something an
// operator must look at, such as an outbound event that went dead, a
// Lightning hold that needs an attestation, low gas or insolvency.
//
// An alert is identified by its (type, subject): raising the same pair again
// returns the existing alert and changes nothing, so a condition that is
// detected on every run of a job is raised once. Each new alert also writes
// one error-level log line, for whatever watches the logs. Alerts are never
// deleted; an operator acknowledges them (svc admin alerts).
package alert

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/logging"
)

// Errors.
var (
	ErrNotFound = fault.New(fault.NotFound, "alert not found")
	ErrInvalid  = fault.New(fault.Invalid, "invalid alert")
)

// Alert is one row of operator_alerts.
type Alert struct {
	bun.BaseModel `bun:"table:operator_alerts"`

	ID             int64      `bun:"id,pk,autoincrement" json:"id"`
	Type           string     `bun:"type" json:"type"`
	Subject        string     `bun:"subject" json:"subject"`
	Detail         string     `bun:"detail" json:"detail"`
	CreatedAt      time.Time  `bun:"created_at" json:"created_at"`
	AcknowledgedAt *time.Time `bun:"acknowledged_at" json:"acknowledged_at"`
	AcknowledgedBy *string    `bun:"acknowledged_by" json:"acknowledged_by"`
}

// Acknowledged reports whether an operator has acknowledged the alert.
func (a Alert) Acknowledged() bool { return a.AcknowledgedAt != nil }

// Params describe an alert to raise.
type Params struct {
	// Type names the condition, lowercase with dots, e.g. "event.dead" or
	// "withdrawal.hold_needs_attestation".
	Type string
	// Subject names the thing it is about (an event id, a withdrawal id, an
	// asset); with Type it identifies the alert.
	Subject string
	// Detail tells the operator what happened and what to do.
	Detail string
}

// Service raises, lists and acknowledges alerts.
type Service struct {
	DB  bun.IDB
	Log *slog.Logger
	Now func() time.Time
}

var typePattern = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,99}$`)

// Length limits, as in the table's CHECKs.
const (
	maxSubject = 500
	maxDetail  = 4000
)

func (p Params) validate() error {
	switch {
	case !typePattern.MatchString(p.Type):
		return fmt.Errorf("%w: type %q must be lowercase letters, digits, '_' and '.'", ErrInvalid, p.Type)
	case p.Subject == "" || utf8.RuneCountInString(p.Subject) > maxSubject:
		return fmt.Errorf("%w: subject must have 1 to %d characters", ErrInvalid, maxSubject)
	}
	return nil
}

// Raise records the alert unless one with the same type and subject exists,
// and reports whether it was new. Pass the caller's transaction as idb to
// raise it together with the change that caused it (nil uses s.DB). A new
// alert is logged at error level at once; should the caller's transaction
// then roll back, the line names an alert that does not exist, which is
// the safe way round (the reverse would be an alert nobody was told of).
func (s *Service) Raise(ctx context.Context, idb bun.IDB, p Params) (Alert, bool, error) {
	if err := p.validate(); err != nil {
		return Alert{}, false, err
	}
	if idb == nil {
		idb = s.DB
	}
	detail := p.Detail
	if utf8.RuneCountInString(detail) > maxDetail {
		detail = string([]rune(detail)[:maxDetail-1]) + "…"
	}
	a := Alert{Type: p.Type, Subject: p.Subject, Detail: detail, CreatedAt: s.Now().UTC()}
	err := idb.NewInsert().Model(&a).ExcludeColumn("id").On("CONFLICT (type, subject) DO NOTHING").Returning("id").Scan(ctx)
	if db.IsNoRows(err) { // it exists already
		var cur Alert
		if err := idb.NewSelect().Model(&cur).Where("type = ? AND subject = ?", p.Type, p.Subject).Scan(ctx); err != nil {
			return Alert{}, false, fmt.Errorf("read alert %s %s: %w", p.Type, p.Subject, err)
		}
		return cur, false, nil
	}
	if err != nil {
		return Alert{}, false, fmt.Errorf("raise alert %s %s: %w", p.Type, p.Subject, err)
	}
	s.log().ErrorContext(ctx, "operator alert raised", "alert_id", a.ID, "alert_type", a.Type, "subject", a.Subject, "detail", a.Detail)
	return a, true, nil
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

// ListParams filter List.
type ListParams struct {
	// Open keeps only alerts not yet acknowledged.
	Open bool
	// Limit caps the number returned (default 50).
	Limit int
}

// List returns alerts, newest first.
func (s *Service) List(ctx context.Context, p ListParams) ([]Alert, error) {
	if p.Limit <= 0 {
		p.Limit = 50
	}
	out := []Alert{}
	q := s.DB.NewSelect().Model(&out).OrderExpr("created_at DESC, id DESC").Limit(int64(p.Limit))
	if p.Open {
		q = q.Where("acknowledged_at IS NULL")
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list alerts: %w", err)
	}
	return out, nil
}

// Get returns one alert.
func (s *Service) Get(ctx context.Context, id int64) (Alert, error) {
	var a Alert
	err := s.DB.NewSelect().Model(&a).Where("id = ?", id).Scan(ctx)
	if err := db.Found(err, ErrNotFound, "read alert %d", id); err != nil {
		return Alert{}, err
	}
	return a, nil
}

// Acknowledge marks the alert as seen by "by" (an operator's name or key
// id). Acknowledging twice keeps the first acknowledgement.
func (s *Service) Acknowledge(ctx context.Context, id int64, by string) (Alert, error) {
	if by == "" || utf8.RuneCountInString(by) > 200 {
		return Alert{}, fmt.Errorf("%w: acknowledged by must have 1 to 200 characters", ErrInvalid)
	}
	var a Alert
	err := s.DB.NewUpdate().Model(&a).Set("acknowledged_at = ?, acknowledged_by = ?", s.Now().UTC(), by).
		Where("id = ? AND acknowledged_at IS NULL", id).Returning("*").Scan(ctx)
	if db.IsNoRows(err) {
		return s.Get(ctx, id)
	}
	if err != nil {
		return Alert{}, fmt.Errorf("acknowledge alert %d: %w", id, err)
	}
	return a, nil
}
