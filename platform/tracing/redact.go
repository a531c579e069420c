package tracing

import (
	"context"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Redactor is the span processor that keeps secrets out of exported spans:
// the HTTP instrumentation records the request's URL with its query string
// (a client may put an API key there; a platform's webhook URL may carry a
// token) and the user name of Basic authentication. The query and any
// user info are dropped from URLs, and the user name is blanked, when the
// span starts, before any exporter sees it. SQL text is not recorded at all
// (platform/db: bun writes values into the statement).
type Redactor struct{}

// redacted are the URL attributes of the semantic conventions the
// instrumentation libraries use (old and current names).
var redacted = map[attribute.Key]bool{
	"url.full": true, "http.url": true, "http.target": true, "url.query": true, "enduser.id": true,
}

// OnStart rewrites the attributes that may carry secrets.
func (Redactor) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	var fix []attribute.KeyValue
	for _, kv := range s.Attributes() {
		if !redacted[kv.Key] {
			continue
		}
		if v := redactValue(kv.Key, kv.Value.AsString()); v != kv.Value.AsString() {
			fix = append(fix, kv.Key.String(v))
		}
	}
	if len(fix) > 0 {
		s.SetAttributes(fix...)
	}
}

func redactValue(k attribute.Key, v string) string {
	switch k {
	case "url.query", "enduser.id":
		return ""
	case "http.target":
		path, _, _ := strings.Cut(v, "?")
		return path
	}
	u, err := url.Parse(v)
	if err != nil {
		path, _, _ := strings.Cut(v, "?")
		return path
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// OnEnd does nothing.
func (Redactor) OnEnd(sdktrace.ReadOnlySpan) {}

// Shutdown does nothing.
func (Redactor) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing.
func (Redactor) ForceFlush(context.Context) error { return nil }
