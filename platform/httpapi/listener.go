package httpapi

import (
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
)

// Listener bounds what a flood of clients can take from the api, and
// keeps it serving through one.
//
// At most maxConns connections are open at once (netutil.LimitListener;
// maxConns <= 0: no bound): the next one waits in the kernel's accept
// queue until a slot frees, so file descriptors and the memory of
// connection buffers stay bounded however many clients arrive.
//
// An accept that fails for want of a resource (too many open files in the
// process or the system, no buffer space, a connection aborted before it
// was accepted) is retried after a pause that doubles from 5 ms to 1 s, as
// net/http's server does, instead of being returned: fasthttp treats every
// accept error but a timeout as the end of the server, so one moment
// without a free descriptor would stop the api for good. The first error
// of a streak is logged, and the recovery with how long it lasted.
func Listener(ln net.Listener, maxConns int, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.Default()
	}
	var l net.Listener = &retryListener{Listener: ln, log: log}
	if maxConns > 0 {
		l = netutil.LimitListener(l, maxConns)
	}
	return l
}

type retryListener struct {
	net.Listener
	log   *slog.Logger
	sleep func(time.Duration) // time.Sleep; tests replace it
}

func (l *retryListener) Accept() (net.Conn, error) {
	var (
		pause   time.Duration
		since   time.Time
		retries int
	)
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if retries > 0 {
				l.log.Info("http: accepting connections again", "after", time.Since(since).Round(time.Millisecond).String(), "retries", retries)
			}
			return c, nil
		}
		if !retryableAccept(err) {
			return nil, err
		}
		if retries == 0 {
			since = time.Now()
			l.log.Warn("http: accept failed, retrying", "error", err.Error())
		}
		retries++
		if pause == 0 {
			pause = 5 * time.Millisecond
		} else if pause *= 2; pause > time.Second {
			pause = time.Second
		}
		if l.sleep != nil {
			l.sleep(pause)
		} else {
			time.Sleep(pause)
		}
	}
}

// retryableAccept reports whether an accept error is a passing shortage
// rather than a closed or broken listener.
func retryableAccept(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
