//! The follower graph of "Introduction to HBase Schema Design": one row per relationship, keyed
//! `md5(follower) + md5(followed)` in a one-letter family `f`. Who A follows is a short prefix
//! scan, "does A follow B" a get, unfollowing a delete. The digests give every user the same
//! 16-byte key width and spread users evenly; the names are kept in columns and restored on read.
//!
//! "Who follows A" needs the inverse key. Rather than a second, hand-kept entity keyed
//! `md5(followed) + md5(follower)` (two writes per follow, which a crash between them leaves
//! disagreeing), `Follows` declares a secondary index `by_followed` on the followed user, and
//! Cellar writes its entry with every follow and unfollow. The index stays right across crashes:
//! on the embedded engine a follow reads its row and then commits the follow row and its index
//! entry in one atomic write across the two tables, which the example measures; on a store
//! without such writes (Cloud Bigtable) index changes are written unverified before the data
//! row and settled after it, and a reader trusts an unverified entry only if its data row
//! implies it. "Who follows A" is one scan of the index table, which copies the follower's name
//! and the date, so no follow row is read.
//!
//! Run with `cargo run --release --example followers`. Every printed result is also asserted.

use cellar::orm::{Entity as _, Repository, Result};
use cellar::prelude::*;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "follows", family = "f", index(name = "by_followed", on(followed), include(follower, since)))]
struct Follows {
    #[cellar(key, hash = "md5", column = "a")]
    follower: String,
    #[cellar(key, hash = "md5", column = "b")]
    followed: String,
    #[cellar(column = "t")]
    since: Timestamp,
}

/// The graph: one entity, both directions.
struct Graph {
    follows: Repository<Follows>,
}

impl Graph {
    fn open(db: &Db) -> Result<Graph> {
        Ok(Graph { follows: db.repo()? })
    }

    /// One put: the index entry is written with it.
    fn follow(&self, follower: &str, followed: &str, since: Timestamp) -> Result<()> {
        self.follows.put(&Follows { follower: follower.into(), followed: followed.into(), since })
    }

    /// One delete: the index entry goes with it.
    fn unfollow(&self, follower: &str, followed: &str) -> Result<()> {
        self.follows.delete((follower.to_string(), followed.to_string()))
    }

    fn does_follow(&self, follower: &str, followed: &str) -> Result<bool> {
        self.follows.exists((follower.to_string(), followed.to_string()))
    }

    /// Whom `user` follows, by name (the scan returns them in digest order).
    fn following(&self, user: &str) -> Result<Vec<String>> {
        let rows = self.follows.scan().prefix(FollowsKey::follower(user.into())).to_vec()?;
        Ok(sorted(rows.into_iter().map(|f| f.followed)))
    }

    /// Who follows `user`, by name, and since when: through the index.
    fn followers(&self, user: &str) -> Result<Vec<(String, Timestamp)>> {
        // The index copies `follower` and `since`: a covered read, no follow rows read.
        let entries = self.follows.index(Follows::BY_FOLLOWED).scan().prefix(user.to_string()).entries()?;
        let mut v = entries
            .iter()
            .map(|e| Ok((e.get::<String>("follower")?, e.get::<Timestamp>("since")?)))
            .collect::<Result<Vec<_>>>()?;
        v.sort();
        Ok(v)
    }
}

fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = names.collect();
    v.sort();
    v
}

fn names(followers: &[(String, Timestamp)]) -> Vec<&str> {
    followers.iter().map(|(name, _)| name.as_str()).collect()
}

pub(crate) fn main() -> Result<()> {
    let db = Db::open_temporary()?;
    let graph = Graph::open(&db)?;
    println!("{}", Follows::layout());
    assert_eq!(Follows::advice(), [], "hashed keys and a one-letter family follow the rules of thumb");

    let t = Timestamp(1_795_856_400_000);
    for (a, b) in [("alice", "bob"), ("alice", "carol"), ("alice", "dave"), ("bob", "alice")] {
        graph.follow(a, b, t)?;
    }
    // The follow row and its index entry in one atomic commit, made from the row as read, in
    // one store call: the engine holds the row from the read to the commit.
    let (followed, costs) = db.measure(|| graph.follow("carol", "alice", t));
    followed?;
    println!("carol follows alice  costs: {costs}");
    let calls = (costs.round_trips(), costs.gets, costs.group_mutates, costs.rows_written);
    assert_eq!(calls, (1, 0, 1, 2), "one read-and-commit writing the follow row and its index row");
    let following = graph.following("alice")?;
    println!("alice follows {following:?}");
    assert_eq!(following, ["bob", "carol", "dave"]);

    let answers = [graph.does_follow("alice", "bob")?, graph.does_follow("bob", "carol")?];
    println!("alice follows bob: {}, bob follows carol: {}", answers[0], answers[1]);
    assert_eq!(answers, [true, false]);

    let (followers, costs) = db.measure(|| graph.followers("alice"));
    let followers = followers?;
    println!("alice is followed by {:?}", names(&followers));
    println!("  costs: {costs}");
    assert_eq!(followers, [("bob".to_string(), t), ("carol".to_string(), t)]);
    let rows = (costs.scans, costs.gets, costs.rows_read);
    assert_eq!(rows, (1, 0, 2), "one index scan of 2 entries, no follow rows read");

    graph.unfollow("alice", "carol")?;
    let (following, of_carol) = (graph.following("alice")?, graph.followers("carol")?);
    println!("after alice unfollows carol: alice follows {following:?}; carol's followers {:?}", names(&of_carol));
    assert_eq!(following, ["bob", "dave"]);
    assert!(of_carol.is_empty());
    assert!(!graph.does_follow("alice", "carol")?);

    println!("followers: ok");
    Ok(())
}
