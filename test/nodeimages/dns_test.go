// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeimages

import (
	"errors"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// testZone is the domain the test's DNS server answers for: an A query
// for any name in it gets testAddress, any other query an empty answer;
// names elsewhere do not exist.
const testZone = "test."

var testAddress = [4]byte{127, 0, 0, 1}

// serveDNS answers UDP queries on 127.0.0.1:53, where every container's
// resolv.conf points, until t ends.
func serveDNS(t *testing.T) {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		t.Fatalf("listening for DNS: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			if reply, err := answer(buf[:n]); err == nil {
				_, _ = conn.WriteTo(reply, from)
			}
		}
	}()
}

// answer is the reply to one query.
func answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	inZone := strings.HasSuffix(strings.ToLower(q.Name.String()), "."+testZone)
	rcode := dnsmessage.RCodeSuccess
	if !inZone {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if inZone && q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5}
		if err := b.AResource(rh, dnsmessage.AResource{A: testAddress}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
