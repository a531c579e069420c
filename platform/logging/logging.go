// Package logging holds what the service's packages share about their
// slog loggers: the one a service, client or handler uses when its Log was
// left unset.
package logging

import "log/slog"

// Or is l, or slog's default logger when l is nil.
func Or(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
