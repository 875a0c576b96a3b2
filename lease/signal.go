package lease

import "sync"

// Release signals, process-wide: a Release wakes every waiter for the same
// lease in this process, whichever Client (and spanner.Client) it uses, so
// an in-process waiter takes a freed lease without waiting for a poll.
var signals = struct {
	sync.Mutex
	m map[string]*signal
}{m: map[string]*signal{}}

type signal struct {
	ch   chan struct{}
	refs int
}

// subscribe returns a channel closed by the next announceRelease of key, and
// a function to call when no longer waiting.
func subscribe(key string) (<-chan struct{}, func()) {
	signals.Lock()
	defer signals.Unlock()
	s := signals.m[key]
	if s == nil {
		s = &signal{ch: make(chan struct{})}
		signals.m[key] = s
	}
	s.refs++
	return s.ch, func() {
		signals.Lock()
		defer signals.Unlock()
		s.refs--
		if s.refs == 0 && signals.m[key] == s {
			delete(signals.m, key)
		}
	}
}

func announceRelease(key string) {
	signals.Lock()
	defer signals.Unlock()
	if s := signals.m[key]; s != nil {
		close(s.ch)
		delete(signals.m, key)
	}
}

// subscribeAll returns a channel closed by the next release of any of names
// in this process, and a function to call when no longer waiting.
func (c *Client) subscribeAll(names []string) (<-chan struct{}, func()) {
	if len(names) == 1 {
		return subscribe(c.st.signalKey(names[0]))
	}
	woken := make(chan struct{})
	stop := make(chan struct{})
	var unsubs []func()
	var once sync.Once
	for _, name := range names {
		ch, unsubscribe := subscribe(c.st.signalKey(name))
		unsubs = append(unsubs, unsubscribe)
		go func() {
			select {
			case <-ch:
				once.Do(func() { close(woken) })
			case <-stop:
			}
		}()
	}
	return woken, func() {
		close(stop)
		for _, u := range unsubs {
			u()
		}
	}
}
