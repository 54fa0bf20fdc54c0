package peer

import "reflect"

// PluginList describes the plugins of a (an *adaptation.Adaptation, which
// the caller has locked) by reflection: the adaptation keeps them in an
// unexported field and offers no accessor. It relies on the field layout
// both NRI versions share (plugins []*plugin; plugin{idx, base, pid, cmd,
// events, closed}); pretty formats an event mask (api.EventMask's
// PrettyString), and extra, when not nil, adds a version's own fields of
// plugin p to its item.
func PluginList(a any, pretty func(mask int32) string, extra func(p reflect.Value, item map[string]any)) []map[string]any {
	list := []map[string]any{}
	ps := reflect.ValueOf(a).Elem().FieldByName("plugins")
	if !ps.IsValid() {
		return list
	}
	for i := 0; i < ps.Len(); i++ {
		p := ps.Index(i).Elem()
		idx := p.FieldByName("idx").String()
		base := p.FieldByName("base").String()
		mask := int32(p.FieldByName("events").Int())
		item := map[string]any{
			"name":          idx + "-" + base,
			"index":         idx,
			"base":          base,
			"pid":           p.FieldByName("pid").Int(),
			"external":      p.FieldByName("cmd").IsNil(),
			"events":        mask,
			"events_pretty": pretty(mask),
			"closed":        p.FieldByName("closed").Bool(),
		}
		if extra != nil {
			extra(p, item)
		}
		list = append(list, item)
	}
	return list
}

// MaskString formats an event mask as the caller's api.EventMask (M) does
// with PrettyString: the pretty argument of PluginList.
func MaskString[M ~int32, PM interface {
	*M
	PrettyString() string
}](mask int32) string {
	m := M(mask)
	return PM(&m).PrettyString()
}
