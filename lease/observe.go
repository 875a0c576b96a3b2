package lease

import (
	"context"
	"fmt"
)

// Observe reports the named lease's holder each time it changes: first the
// current state, then every new holder or token, and vacancy as a Holder with
// only Name set (Token 0). It reads the row once per poll interval, and at
// once after a Release in this process. The channel is closed when ctx ends
// or the Client closes; changes that happen while the receiver is busy are
// coalesced.
func (c *Client) Observe(ctx context.Context, name string) (<-chan Holder, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: Observe: %w", err)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	ch := make(chan Holder)
	go c.observe(ctx, name, ch)
	return ch, nil
}

func (c *Client) observe(ctx context.Context, name string, ch chan<- Holder) {
	defer close(ch)
	var last Holder
	first := true
	for {
		signal, unsubscribe := subscribe(c.st.signalKey(name))
		err := c.st.prepare(ctx)
		var r row
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
			r, err = readRow(rctx, c.st.db.Single(), c.st.sql, name)
			cancel()
		}
		switch {
		case err != nil && ctx.Err() == nil && c.keeper.background.Err() == nil:
			c.log.Warn("observing a lease failed; retrying", "name", name, "err", c.st.explain(err))
		case err == nil:
			h := Holder{Name: name}
			if r.live {
				h = r.holder()
			}
			if first || h.Token != last.Token || h.HolderID != last.HolderID {
				select {
				case ch <- h:
					first, last = false, h
				case <-ctx.Done():
				case <-c.keeper.background.Done():
				}
			}
		}
		select {
		case <-ctx.Done():
			unsubscribe()
			return
		case <-c.keeper.background.Done():
			unsubscribe()
			return
		case <-signal:
		case <-c.pollTimer():
		}
		unsubscribe()
	}
}
