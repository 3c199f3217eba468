"""The report's own style sheet and boot script, and plotly.js for a report that works
offline (no external resource of any kind).

plotly.js comes in the page as the partial bundle of the traces the figures draw (bar,
heatmap, scatter: the "cartesian" bundle, vendored in ``vendor/`` as npm ships it,
gzip-compressed; see NOTICE), base64 in a data block, unpacked by the browser
(``DecompressionStream``) and run under the page's nonce: about 0.66 MB instead of the
4.8 MB full bundle inlined as text."""

from __future__ import annotations

import base64
import functools
from importlib.resources import files

__all__ = ["BOOT", "CSS", "PLOTLYJS_BUNDLE", "inline_plotlyjs"]

#: The vendored plotly.js bundle (gzip of the npm package's ``plotly-cartesian.min.js``).
PLOTLYJS_BUNDLE = "plotly-cartesian.min.js.gz"

CSS = """
:root{--red:#c0392b;--amber:#b9770e;--green:#1e8449;--ink:#1c2833;--mute:#5d6d7e;--line:#e5e8eb}
*{box-sizing:border-box}
body{margin:0;font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;
color:var(--ink);background:#f7f8fa;line-height:1.45}
main{max-width:1500px;margin:0 auto;padding:0 18px 40px}
.banner{padding:18px 22px;border-radius:0 0 10px 10px;color:white;margin:0 -18px 14px}
.banner.hang{background:var(--red)}.banner.no_hang{background:var(--green)}
.banner.inconclusive{background:var(--amber)}
.banner .verdict{font-size:26px;font-weight:700;margin:0 0 4px}
.banner .kind{font-size:15px;opacity:.95;margin:0 0 10px}
.banner .headline{font-size:15px;background:rgba(255,255,255,.14);padding:10px 12px;border-radius:6px;
margin:0;overflow-wrap:anywhere}
.banner .fingerprint{font-size:12.5px;opacity:.9;margin:8px 0 0}
.banner ul{margin:8px 0 0;padding-left:20px;font-size:13px}
nav{font-size:13px;margin:0 0 10px;color:var(--mute)}nav a{color:#2e6da4;margin-right:12px}
section{background:white;border:1px solid var(--line);border-radius:8px;margin:0 0 14px;padding:12px 16px}
section h2{font-size:17px;margin:2px 0 8px}
.note{color:var(--mute);font-size:12.5px;margin:4px 0}
.plot{width:100%;min-height:300px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f6;font-weight:600}
td.sum{overflow-wrap:anywhere;max-width:900px}
tr.culprit td:first-child{border-left:4px solid var(--red)}
.tag{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;background:#eef1f4}
.tag.culprit{background:#fadbd8;color:#922b21;font-weight:600}
pre{background:#f4f6f7;border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;
font-size:12.5px;line-height:1.35;margin:6px 0}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;font-size:13.5px;margin:0}
dl.summary dt{color:var(--mute)}dl.summary dd{margin:0;overflow-wrap:anywhere}
details summary{cursor:pointer;font-size:13px;color:#2e6da4}
footer{color:var(--mute);font-size:12px;text-align:center;margin-top:18px}
.noscript{color:var(--red);font-size:13px}
.meta{font-size:12.5px;color:var(--mute);margin:0 0 8px;overflow-wrap:anywhere}
.meta code{font-size:12px}
.scroll{overflow-x:auto;max-width:100%}
.banner .detail{opacity:.9}
@media (max-width:600px){main{padding:0 8px 30px}.banner{margin:0 -8px 12px;padding:14px}
.banner .verdict{font-size:21px}section{padding:10px 8px}.plot{min-height:260px}
table{display:block;overflow-x:auto;max-width:100%}td.sum{min-width:260px}}
.plot{max-width:100%;overflow:hidden}
#ticket{margin:0 0 10px}#ticket pre{white-space:pre-wrap;overflow-wrap:anywhere}
button.copy{font-size:12px;margin:4px 0;cursor:pointer}
"""

# Unpacks the bundle of the data block #plotly-gz and runs it as a script of the page's
# nonce; BOOT waits for it (window.hangscopePlotly).
_UNPACK = """
window.hangscopePlotly=(function(){
  var nonce=document.currentScript.nonce;
  if(!window.DecompressionStream||!window.Response){
    return Promise.reject(new Error('this browser cannot unpack plotly.js (no DecompressionStream)'));}
  var bin=atob(document.getElementById('plotly-gz').textContent.trim());
  var bytes=new Uint8Array(bin.length);
  for(var i=0;i<bin.length;i++){bytes[i]=bin.charCodeAt(i);}
  var text=new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Response(text).text().then(function(code){
    var s=document.createElement('script');s.nonce=nonce;s.textContent=code;
    document.head.appendChild(s);
    if(!window.Plotly){throw new Error('plotly.js did not start');}
  });
})();
"""


@functools.cache
def _bundle_base64() -> str:
    packed = (files("analyzer.render") / "vendor" / PLOTLYJS_BUNDLE).read_bytes()
    return base64.b64encode(packed).decode("ascii")


def inline_plotlyjs(nonce: str) -> str:
    """The tags that bring plotly.js into the page without a request: the compressed bundle
    as a data block (never run as it is) and the script of ``nonce`` that unpacks it."""
    return (
        f"<script type='application/gzip;base64' id='plotly-gz'>{_bundle_base64()}</script>"
        f'<script nonce="{nonce}">{_UNPACK}</script>'
    )


BOOT = """
(function(){
  var t0=performance.now();
  var narrow=window.innerWidth<700;
  var cfg={responsive:true,displaylogo:false,scrollZoom:false,displayModeBar:narrow?false:'hover',
           modeBarButtonsToRemove:['select2d','lasso2d'],toImageButtonOptions:{format:'png',scale:2}};
  function phone(layout,data){
    /* at phone width: the plot takes the card's width, the legend goes under it, at the
       foot of the figure below the axis title, and the figure grows by what its margins
       grow so the plot keeps its height */
    delete layout.width;layout.autosize=true;
    var m=layout.margin||{};var t0=m.t||100,b0=m.b||80;
    var shown=(data||[]).filter(function(d){return d.showlegend!==false&&d.name;}).length;
    var foot=shown?70+22*shown:0;
    layout.legend=Object.assign({},layout.legend||{},{orientation:'h',x:0,xanchor:'left',yref:'container',y:0,yanchor:'bottom'});
    layout.margin=Object.assign({},m,{l:Math.min(m.l||10,60),r:8,b:Math.max(m.b||50,foot||60)});
    /* no colorbar beside a narrow plot: the shade's meaning is in the hover */
    (data||[]).forEach(function(d){if(d.colorbar){d.showscale=false;}});
    /* long axis labels (lanes, group names) shortened to about 30% of the width: a label
       wider than the margin plotly can give would be cut at the left edge */
    var keep=Math.max(10,Math.floor(window.innerWidth*0.3/7));
    Object.keys(layout).filter(function(k){return /^yaxis\\d*$/.test(k);}).forEach(function(k){
      var ax=layout[k];if(!ax||!ax.ticktext){return;}
      ax.ticktext=ax.ticktext.map(function(t){
        var plain=String(t).replace(/<[^>]*>/g,'');
        return plain.length>keep?plain.slice(0,keep-1)+'…':t;});});
    /* view buttons: one dropdown, which fits the width, above the plot */
    if(layout.updatemenus){layout.updatemenus.forEach(function(u){u.type='dropdown';u.direction='down';u.y=1.0;u.yanchor='bottom';u.x=0;u.xanchor='left';});}
    /* titles and notes wrapped at word boundaries to the width: plotly never wraps them */
    var lines=0;
    function wrap(text,size,width){
      var cols=Math.max(16,Math.floor((width||window.innerWidth-30)/(0.66*(size||12))));
      var out=[],line='';String(text).split('<br>').forEach(function(part){
        part.split(' ').forEach(function(w){
          if(line&&(line+' '+w).replace(/<[^>]*>/g,'').length>cols){out.push(line);line=w;}
          else{line=line?line+' '+w:w;}});
        out.push(line);line='';});
      lines=Math.max(lines,out.length);return out.join('<br>');}
    if(layout.title){
      if(typeof layout.title==='string'){layout.title={text:layout.title};}
      if(layout.title.text){
        var size=(layout.title.font&&layout.title.font.size)||17;
        layout.title.text=wrap(layout.title.text,size);
        layout.title.xref='container';layout.title.x=0.02;layout.title.xanchor='left';
        /* the view buttons sit between the notes and the plot: room for them too */
        layout.margin.t=Math.max(layout.margin.t||40,24+lines*(size+4)+(layout.updatemenus?36:0));}}
    var above=0;
    (layout.annotations||[]).forEach(function(a){if(a&&a.text){
      /* over the plot, not the page: narrower by the axis labels' margin */
      lines=0;a.text=wrap(a.text,(a.font&&a.font.size)||12,window.innerWidth*0.6);
      if(a.xref==='paper'||a.xref===undefined){a.x=Math.min(Math.max(a.x||0,0),1);}
      /* a subplot's title over the top row sits in the top margin, under the notes */
      if(a.yref==='paper'&&a.yanchor==='bottom'&&(a.y||0)>=0.99){
        above=Math.max(above,lines*(((a.font&&a.font.size)||16)+5));}}});
    layout.margin.t+=above;
    layout.height=(layout.height||450)+Math.max(0,layout.margin.t-t0)+Math.max(0,layout.margin.b-b0);
    return layout;
  }
  function plot(el){
    var target=document.getElementById(el.getAttribute('data-plot'));
    try{var spec=JSON.parse(el.textContent);
        if(narrow){spec.layout=phone(spec.layout||{},spec.data);}
        return Plotly.newPlot(target,spec.data,spec.layout,cfg);}
    catch(err){target.textContent='figure failed to render: '+err;console.error(err);return null;}
  }
  document.querySelectorAll('button[data-copy]').forEach(function(b){
    b.addEventListener('click',function(){
      var text=document.getElementById(b.getAttribute('data-copy')).textContent;
      var done=function(){b.textContent='copied';};
      if(navigator.clipboard){navigator.clipboard.writeText(text).then(done,function(){});}
    });
  });
  var jobs=[];
  function failed(err){document.body.setAttribute('data-ready','error');console.error(err);}
  function start(){
    document.querySelectorAll('script[type="application/json"][data-plot]').forEach(function(el){
      var lazy=el.closest('details[data-lazy]');
      if(!lazy){jobs.push(plot(el));return;}
      lazy.addEventListener('toggle',function(){
        if(lazy.open&&!el.hasAttribute('data-done')){el.setAttribute('data-done','1');plot(el);}
      });
    });
    Promise.all(jobs).then(function(){
      document.body.setAttribute('data-render-ms',String(Math.round(performance.now()-t0)));
      document.body.setAttribute('data-ready','1');},failed);
  }
  (window.hangscopePlotly||Promise.resolve()).then(start,function(err){
    document.querySelectorAll('.plot').forEach(function(p){p.textContent='figures unavailable: '+err.message;});
    failed(err);});
})();
"""
