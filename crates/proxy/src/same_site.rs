//! Browsers known to mishandle `SameSite=None` (ingress-nginx's
//! `session-cookie-conditional-samesite-none` leaves the attribute out for them): some
//! read the unknown value as `Strict` (Safari on macOS 10.14 and every browser on iOS
//! 12, whose cookie store is the system's), some refuse the whole cookie (Chrome and
//! Chromium 51 to 66, UC Browser before 12.13.2). The list is the one browser vendors
//! published when `SameSite=None` became necessary for cross-site cookies; it only
//! shrinks as those versions leave use.

/// Whether the browser of `agent` (a `User-Agent` value) mishandles `SameSite=None`.
pub(crate) fn rejects_none(agent: &str) -> bool {
    ios_12(agent) || macos_10_14_safari(agent) || chromium_51_to_66(agent) || uc_before(agent)
}

/// The number at the start of `s` (digits only), if any.
fn leading_number(s: &str) -> Option<u32> {
    let end = s.bytes().take_while(u8::is_ascii_digit).count();
    s[..end].parse().ok()
}

/// Any browser on iOS 12 (iPhone, iPad, iPod: `(iPhone; CPU iPhone OS 12_1 like Mac OS X)`).
fn ios_12(agent: &str) -> bool {
    let Some(at) = agent.find("(iP") else {
        return false;
    };
    let device = &agent[at..];
    let device = &device[..device.find(')').unwrap_or(device.len())];
    agent.contains("AppleWebKit/")
        && device
            .find(" OS ")
            .and_then(|i| leading_number(&device[i + 4..]))
            == Some(12)
}

/// Safari, or an app's embedded web view, on macOS 10.14.
fn macos_10_14_safari(agent: &str) -> bool {
    let Some(at) = agent.find("(Macintosh;") else {
        return false;
    };
    let platform = &agent[at..];
    let platform = &platform[..platform.find(')').unwrap_or(platform.len())];
    let on_10_14 = platform
        .find("Mac OS X 10_14")
        .is_some_and(|i| !platform[i + 14..].starts_with(|c: char| c.is_ascii_digit()));
    if !on_10_14 || !agent.contains("AppleWebKit/") {
        return false;
    }
    let chromium = agent.contains("Chrome/") || agent.contains("Chromium/");
    let safari = agent.contains("Version/") && agent.contains("Safari/") && !chromium;
    // An embedded web view names no browser: it ends with WebKit's own token.
    let embedded = agent.trim_end().ends_with("(KHTML, like Gecko)");
    safari || embedded
}

/// Chrome or Chromium 51 to 66.
fn chromium_51_to_66(agent: &str) -> bool {
    ["Chrome/", "Chromium/"].iter().any(|token| {
        agent
            .find(token)
            .and_then(|i| leading_number(&agent[i + token.len()..]))
            .is_some_and(|major| (51..=66).contains(&major))
    })
}

/// UC Browser before 12.13.2.
fn uc_before(agent: &str) -> bool {
    const TOKEN: &str = "UCBrowser/";
    let Some(at) = agent.find(TOKEN) else {
        return false;
    };
    let mut parts = agent[at + TOKEN.len()..].split('.').map(leading_number);
    let version = (
        parts.next().flatten(),
        parts.next().flatten(),
        parts.next().flatten(),
    );
    match version {
        (Some(a), Some(b), Some(c)) => (a, b, c) < (12, 13, 2),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::rejects_none;

    #[test]
    fn known_incompatible_browsers() {
        for agent in [
            "Mozilla/5.0 (iPhone; CPU iPhone OS 12_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.0 Mobile/15E148 Safari/604.1",
            "Mozilla/5.0 (iPad; CPU OS 12_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/76.0.3809.81 Mobile/15E148 Safari/605.1",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.0 Safari/605.1.15",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko)",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/65.0.3325.181 Safari/537.36",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Ubuntu Chromium/51.0.2704.79 Chrome/51.0.2704.79 Safari/537.36",
            "Mozilla/5.0 (Linux; U; Android 8.1.0; en-US; Nexus 6P Build/OPM7.181205.001) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/57.0.2987.108 UCBrowser/12.11.1.1197 Mobile Safari/537.36",
        ] {
            assert!(rejects_none(agent), "{agent}");
        }
    }

    #[test]
    fn current_browsers_get_none() {
        for agent in [
            "",
            "curl/8.5.0",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 13_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.0 Mobile/15E148 Safari/604.1",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15",
            // Chrome on macOS 10.14 handles `None` (only Safari and web views do not).
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/67.0.3396.99 Safari/537.36",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0",
            "Mozilla/5.0 (Linux; U; Android 10; en-US; SM-G960F) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/78.0.3904.108 UCBrowser/13.4.0.1306 Mobile Safari/537.36",
        ] {
            assert!(!rejects_none(agent), "{agent}");
        }
    }
}
