//! [`one_line`]: an error and its causes as one line.

/// `e` and its causes on one line, each cause once (a cause whose text is already part of the
/// line is left out), for logs, webhook reports and
/// `watch::Event::Error::message`.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = String::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !msg.contains(&text) {
            msg.push_str(if msg.is_empty() { "" } else { ": " });
            msg.push_str(&text);
        }
        next = cause.source();
    }
    msg.replace('\n', " ")
}
