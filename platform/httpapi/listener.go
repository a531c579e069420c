package httpapi

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Limited is the api's listener: it bounds what a flood of clients can
// take from the api, and keeps it serving through one.
//
// At most maxConns connections are served at once: when all are taken and
// another client connects, the keep-alive connections that sit idle
// between requests are ended to make room (a client's pool reconnects;
// Go's client retries on a new connection a request that carries an
// Idempotency-Key), and if none is idle the newcomer waits, with the
// connections behind it in the kernel's accept queue, until one closes. So file descriptors
// and the memory of connection buffers stay bounded however many clients
// arrive, and clients that went quiet cannot keep new ones out. The server
// reports idle connections through ConnState (set it as the fasthttp
// server's ConnState).
//
// An accept that fails for want of a resource (too many open files in the
// process or the system, no buffer space, a connection aborted before it
// was accepted) is retried after a pause that doubles from 5 ms to 1 s, as
// net/http's server does, instead of being returned: fasthttp treats every
// accept error but a timeout as the end of the server, so one moment
// without a free descriptor would stop the api for good. The first error
// of a streak is logged, and the recovery with how long it lasted.
type Limited struct {
	net.Listener // retrying
	log          *slog.Logger
	slots        chan struct{} // nil: no bound
	done         chan struct{}
	closeOnce    sync.Once

	mu       sync.Mutex
	idle     map[*slotConn]struct{}
	lastShed time.Time
}

// Listener wraps ln (maxConns <= 0: no bound on connections).
func Listener(ln net.Listener, maxConns int, log *slog.Logger) *Limited {
	if log == nil {
		log = slog.Default()
	}
	l := &Limited{Listener: &retryListener{Listener: ln, log: log}, log: log, done: make(chan struct{}),
		idle: map[*slotConn]struct{}{}}
	if maxConns > 0 {
		l.slots = make(chan struct{}, maxConns)
	}
	return l
}

// Accept takes the next connection, then a free slot for it: when there
// is none it closes the idle connections, and again every 50 ms while it
// waits (a connection may go idle meanwhile), until one closes. Only a
// client actually waiting makes it shed, and it holds one descriptor more
// than the bound at most.
func (l *Limited) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.slots == nil {
		return c, err
	}
	select {
	case l.slots <- struct{}{}:
		return &slotConn{Conn: c, l: l}, nil
	default:
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		l.shedIdle()
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, l: l}, nil
		case <-l.done:
			_ = c.Close()
			return nil, net.ErrClosed
		case <-tick.C:
		}
	}
}

// Close stops accepting; open connections are the server's to close.
func (l *Limited) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// ConnState tracks which connections are idle between requests.
func (l *Limited) ConnState(c net.Conn, s fasthttp.ConnState) {
	sc, ok := c.(*slotConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == fasthttp.StateIdle {
		l.idle[sc] = struct{}{}
	} else {
		delete(l.idle, sc)
	}
}

// shedIdle ends every idle connection: all slots are taken.
func (l *Limited) shedIdle() {
	l.mu.Lock()
	shed := make([]*slotConn, 0, len(l.idle))
	for c := range l.idle {
		shed = append(shed, c)
		delete(l.idle, c) // ended once; the server reports it again if it stays
	}
	logIt := len(shed) > 0 && time.Since(l.lastShed) > time.Minute
	if logIt {
		l.lastShed = time.Now()
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("http: every connection slot is taken; ending idle keep-alive connections", "slots", cap(l.slots), "ended", len(shed))
	}
	// Not Close: the server may be taking up the connection for a request
	// that has just arrived, and fasthttp panics when a deadline cannot be
	// set on a connection closed under it. A read deadline in the past ends
	// the idle wait the server's way (it closes the connection itself);
	// if a request has just started, the server's own deadlines replace it.
	now := time.Now()
	for _, c := range shed {
		_ = c.SetReadDeadline(now)
	}
}

// slotConn holds one of the listener's slots until it is closed.
type slotConn struct {
	net.Conn
	l    *Limited
	once sync.Once
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

type retryListener struct {
	net.Listener
	log *slog.Logger
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
		time.Sleep(pause)
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
