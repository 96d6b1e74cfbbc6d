// Package watchjson watches one typed resource with a JSON decoder that reads each event once.
//
// client-go's watch decoder reads each event's JSON about seven times: once to find where the
// event ends (encoding/json's Decoder), then for the event and again for the object inside it
// once to find its apiVersion and kind, once to check that it is valid JSON and once to decode
// it. On a cold start the informer's watch list streams every object through it: at 100,000
// LockRequests that decoder was 48% of the manager's CPU (docs/performance.md, cold start).
//
// The API server writes a JSON watch stream one compact event per line (each event encoded
// with a trailing newline; a JSON string cannot hold a raw newline). So a line is an event, and
// one decode of the line into {type, object *T} is the whole event: the line is read twice
// (validated, decoded), not seven times. An ERROR event, whose object is a Status, is decoded
// again as one.
//
// Only streams framed as kube-apiserver frames them are read: one compact event a line. A
// proxy that re-encodes a watch (pretty-printing it, or putting two events on a line) makes
// every watch end in a decoding error and the informer relist. Where client-go would decode
// something kube-apiserver does not send, this decoder fails closed: an object of another
// kind ends the watch (client-go's reflector skips it), and so does a line that is not one
// event. One difference stays: an event with two "object" keys, which no encoder writes, is
// decoded as encoding/json decodes a repeated key into a pointer (the second merged into the
// first), where client-go keeps the second.
package watchjson

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	kjson "sigs.k8s.io/json"
)

// maxLine is the longest event accepted, as client-go's streaming decoder accepts.
const maxLine = 16 << 20

// Object is the pointer type of a typed API object T.
type Object[T any] interface {
	*T
	runtime.Object
}

// Watcher starts watches of one resource of kind gvk, decoded into *T.
type Watcher[T any, PT Object[T]] struct {
	client   rest.Interface
	resource string
	gvk      schema.GroupVersionKind
	params   runtime.ParameterCodec
	// userAgent is sent with each watch: the transport of a shared HTTP client would send its
	// own config's, and the API server's audit log tells this watch apart by it.
	userAgent string
	// retries and retryWait: a watch whose connection fails before the server answers is
	// tried again, as client-go's Request.Watch tries it (10 times, 1 s apart).
	retries   int
	retryWait time.Duration
}

// UserAgentSuffix marks this package's watches in the API server's audit log.
const UserAgentSuffix = " watchjson"

// New is a Watcher of resource (e.g. "lockrequests") of kind gvk, through a REST client made
// from cfg that shares httpClient's connections; scheme encodes its query parameters and
// decodes the Status of a refused watch (a 410 Gone, a 429), as controller-runtime's client
// does. Its watches are not rate limited, as client-go's are not (a watch is one long request).
func New[T any, PT Object[T]](cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, gvk schema.GroupVersionKind, resource string) (*Watcher[T, PT], error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: gvk.Group, Version: gvk.Version}
	c.APIPath = "/apis"
	if gvk.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	client, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, err
	}
	agent := cfg.UserAgent
	if agent == "" {
		agent = rest.DefaultKubernetesUserAgent()
	}
	return &Watcher[T, PT]{client: client, resource: resource, gvk: gvk, params: runtime.NewParameterCodec(scheme),
		userAgent: agent + UserAgentSuffix, retries: 10, retryWait: time.Second}, nil
}

// Watch starts a watch with opts (Watch is set), cluster-wide, as controller-runtime's cache
// starts one for an informer without a namespace or selectors. When the connection fails
// before the server answers (EOF, a timeout) it tries again, as client-go's Request.Watch does,
// and then returns a watch that has ended, and the reflector starts again. Without the tries,
// a watch list that ends at once falls back to a full list.
func (w *Watcher[T, PT]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	var body io.ReadCloser
	for try := 0; ; try++ {
		var err error
		body, err = w.client.Get().Resource(w.resource).VersionedParams(&opts, w.params).SetHeader("User-Agent", w.userAgent).Stream(ctx)
		if err == nil {
			break
		}
		if !utilnet.IsProbableEOF(err) && !utilnet.IsTimeout(err) {
			return nil, err
		}
		// guard:watchjson-retries
		if try >= w.retries {
			return watch.NewEmptyWatch(), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(w.retryWait):
		}
	}
	return watch.NewStreamWatcher(newDecoder[T, PT](body, w.gvk),
		// As client-go's: 500 says the cause is not known.
		apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// decoder reads events of *T from a JSON watch stream, one line each.
type decoder[T any, PT Object[T]] struct {
	body io.ReadCloser
	r    *bufio.Reader
	gvk  schema.GroupVersionKind
	long []byte // a line longer than r's buffer, gathered
	eof  bool   // the stream has ended (its last line, without a newline, was handed out)
}

func newDecoder[T any, PT Object[T]](body io.ReadCloser, gvk schema.GroupVersionKind) *decoder[T, PT] {
	return &decoder[T, PT]{body: body, r: bufio.NewReaderSize(body, 64<<10), gvk: gvk}
}

// event is a watch event whose object is decoded as O.
type event[O any] struct {
	Type   watch.EventType `json:"type"`
	Object *O              `json:"object"`
}

// Decode returns the next event: its type and its object, a *T (a *metav1.Status for ERROR),
// with its apiVersion and kind cleared as client-go's decoder clears them.
func (d *decoder[T, PT]) Decode() (watch.EventType, runtime.Object, error) {
	line, err := d.next()
	if err != nil {
		return "", nil, err
	}
	var ev event[T]
	// A type error in the object (a Status decoded as *T) does not stop the decoding, so an
	// ERROR event's type is read either way; a line that is not JSON is refused before any.
	decodeErr := kjson.UnmarshalCaseSensitivePreserveInts(line, &ev)
	if decodeErr != nil && d.eof {
		// The stream ended within its last event, as client-go's framer reports it: the
		// reflector watches again from the last event it got.
		return "", nil, io.ErrUnexpectedEOF
	}
	if ev.Type == watch.Error {
		var st event[metav1.Status]
		if err := kjson.UnmarshalCaseSensitivePreserveInts(line, &st); err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		// guard:watchjson-error-object
		if st.Object == nil {
			return "", nil, errors.New("unable to decode watch event: an ERROR event without an object")
		}
		st.Object.TypeMeta = metav1.TypeMeta{}
		return watch.Error, st.Object, nil
	}
	if decodeErr != nil {
		return "", nil, fmt.Errorf("unable to decode watch event: %w", decodeErr)
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", ev.Type)
	}
	if ev.Object == nil {
		return "", nil, fmt.Errorf("unable to decode watch event: a %s event without an object", ev.Type)
	}
	obj := PT(ev.Object)
	// A watch of one resource is sent objects of its kind only; anything else ends the watch
	// (client-go's reflector would skip it and go on).
	// guard:watchjson-kind
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk != d.gvk {
		return "", nil, fmt.Errorf("unable to decode watch event: a %s event of %v, want %v", ev.Type, gvk, d.gvk)
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return ev.Type, obj, nil
}

// next is the next non-empty line, without its newline. It is valid until the next call. A
// last line without a newline is handed out too (d.eof then says so), as client-go's framer,
// which reads JSON values, not lines, would hand out a last complete event.
func (d *decoder[T, PT]) next() ([]byte, error) {
	for {
		if d.eof {
			return nil, io.EOF
		}
		line, err := d.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			d.long = append(d.long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = d.r.ReadSlice('\n')
				d.long = append(d.long, line...)
				// guard:watchjson-max-line
				if len(d.long) > maxLine {
					return nil, fmt.Errorf("a watch event longer than %d bytes", maxLine)
				}
			}
			line = d.long
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
			d.eof = true
		}
		// guard:watchjson-skips-blank
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// Close closes the stream.
func (d *decoder[T, PT]) Close() {
	_ = d.body.Close()
}
