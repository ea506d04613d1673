// An event's js= (a panel's hidden #answer-sync box changed: suggestions arrived, as "serial:crc32" of the text they
// are for, its UTF-16 code units as little-endian bytes: suggestions.answer_mark), with the panel's suffix ("" for
// the first, "-2" for a second model's). Once the text box shows that text, the panel's suggestions on screen are no
// longer stale (keyboard.js marks every panel's so on an edit or a click). After the first panel's answer, each other
// model's panel that is shown is asked for its own (its hidden #asked button): none while no second model is chosen.
(() => {
  const TABLE = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc32 = (text) => {
    let crc = 0xffffffff;
    const byte = (b) => { crc = TABLE[(crc ^ b) & 0xff] ^ (crc >>> 8); };
    for (let i = 0; i < text.length; i++) {
      const unit = text.charCodeAt(i);
      byte(unit & 0xff);
      byte(unit >>> 8);
    }
    return (crc ^ 0xffffffff) >>> 0;
  };
  return (answer, panel = "") => {
    if (!panel) {
      for (const asked of document.querySelectorAll("[id^=asked-]")) {
        const column = document.getElementById("suggestions" + asked.id.slice("asked".length));
        if (column && column.offsetParent !== null) asked.click();
      }
    }
    requestAnimationFrame(() => requestAnimationFrame(() => {
      const box = document.querySelector("#text textarea");
      const crc = String(answer || "").split(":")[1];
      if (box && crc === String(crc32(box.value))) document.body.classList.remove("suggestions-stale" + panel);
    }));
    return answer;
  };
})()
